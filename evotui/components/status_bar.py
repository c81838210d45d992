"""The one-line run summary at the top of every screen."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.widget import Widget

from evotui.engine_process import EngineHealth

STATUS_STYLE = {
    "running": "$text-success", "paused": "$text-warning", "created": "$text-accent",
    "finished": "$text-primary", "stopped": "$text-warning", "crashed": "$text-error",
}


def fmt(value, spec: str = ".3f", missing: str = "–") -> str:
    """A number for display; missing values show as a dash."""
    if value is None:
        return missing
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


class RunStatusBar(Widget):
    """Status, step, validation and test accuracy, auto-promote, harness and policy versions, name.

    One line at any width: what an operator must always see (status and activity, step, the
    held-out numbers, auto-promote) stays; the rest shortens or goes first (`fit_header`)."""

    DEFAULT_CSS = """
    RunStatusBar { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._parts: list[HeaderPart] = []

    def show(self, run: dict, health: EngineHealth, asked: str | None = None,
             auto_asked: bool | None = None) -> None:
        """`asked`: what the operator asked for that the engine has not done yet ("stopping…");
        `auto_asked`: the auto-promote value a pending command will set."""
        self._parts = header_parts(run, health, asked, auto_asked)
        self.refresh()

    def render(self) -> Content:
        return fit_header(self._parts, self.content_size.width)


@dataclass(frozen=True)
class HeaderPart:
    """One item of the header: its full text, a shorter one (or None), and its rank: the
    part with the highest rank is shortened first, then dropped unless `keep`, until the line fits."""

    full: Content
    short: Content | None = None
    rank: int = 0
    keep: bool = True


def auto_promote_text(on: bool, asked: bool | None = None, word: str = "auto-promote") -> str:
    """The auto-promote setting, and where a pending command takes it.

    >>> auto_promote_text(False, asked=True)
    'auto-promote -> on (pending)'
    """
    if asked is None or asked == on:
        return f"{word} {'on' if on else 'off'}"
    return f"{word} -> {'on' if asked else 'off'} (pending)"


def header_parts(run: dict, health: EngineHealth, asked: str | None = None,
                 auto_asked: bool | None = None) -> list[HeaderPart]:
    status = run.get("status") or "loading"
    if health.dead:
        status = "dead" if status != "crashed" else status
    style = f"bold {STATUS_STYLE.get(status, '$text-error')}"
    val, test = run.get("val_acc"), run.get("test_acc", run.get("heldout_acc"))
    auto = bool(run.get("auto_promote"))
    auto_style = "$text-warning" if auto or auto_asked else "$text-muted"
    step = f"step {run.get('step') or 0}/{run.get('steps_total') or '?'}"
    return [
        HeaderPart(Content.styled(f"● {status_text(status, run.get('activity'), asked, health.dead)}", style),
                   Content.styled(f"● {status_text(status, None, asked, health.dead)}", style), rank=3),
        HeaderPart(Content(step)),
        HeaderPart(Content(f"val {fmt(val)} · test {fmt(test)}"),
                   Content(f"val {fmt(val, '.2f')} test {fmt(test, '.2f')}"), rank=2),
        HeaderPart(Content.styled(auto_promote_text(auto, auto_asked), auto_style),
                   Content.styled(auto_promote_text(auto, auto_asked, "auto"), auto_style), rank=4),
        HeaderPart(Content(f"harness v{fmt(run.get('harness_version'), 'd')}"),
                   Content(f"H v{fmt(run.get('harness_version'), 'd')}"), rank=5, keep=False),
        HeaderPart(Content(f"policy v{fmt(run.get('policy_version'), 'd')}"), rank=6, keep=False),
        HeaderPart(Content(run.get("name") or ""), rank=7, keep=False),
        HeaderPart(Content(run.get("device") or ""), rank=8, keep=False),  # "2 x cuda"; none on older runs
    ]


def fit_header(parts: list[HeaderPart], width: int, gap: str = "  ") -> Content:
    """The parts in order on one line of `width` cells: the highest ranks are shortened, then
    dropped (unless kept), and as a last resort the line is cut.

    >>> fit_header([HeaderPart(Content("● running")), HeaderPart(Content("demo"), rank=1, keep=False)], 12).plain
    '● running'
    """
    shown = [p.full for p in parts]
    order = sorted((i for i, p in enumerate(parts) if p.rank), key=lambda i: -parts[i].rank)

    def line() -> Content:
        return Content(gap).join(c for c in shown if c is not None and c.plain)

    for i in order:
        if line().cell_length <= width:
            break
        if parts[i].short is not None:
            shown[i] = parts[i].short
        if line().cell_length > width and not parts[i].keep:
            shown[i] = None
    out = line()
    return out if out.cell_length <= width else out.truncate(max(width, 0), ellipsis=True)


def status_text(status: str, activity: str | None, asked: str | None, dead: bool = False) -> str:
    """The header's status: what the operator asked for first ("stopping…", "pausing…"), then what
    the engine reports doing now ("running: held-out eval 16/64").

    >>> status_text("running", "held-out eval 16/64", None)
    'running: held-out eval 16/64'
    >>> status_text("running", "step 3/20: generate", "stopping…")
    'stopping…'
    """
    if dead or status not in ("running", "paused", "created"):
        return status
    if asked:
        return asked
    if activity and activity.endswith("…"):  # the engine's own "stopping…"
        return activity
    return f"{status}: {activity}" if activity and status == "running" else status
