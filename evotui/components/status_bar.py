"""The one-line run summary at the top of every screen."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

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


class RunStatusBar(Static):
    """Status, step, policy and harness versions, validation and test accuracy, auto-promote."""

    DEFAULT_CSS = """
    RunStatusBar { height: 1; background: $panel; padding: 0 1; }
    """

    def show(self, run: dict, health: EngineHealth, asked: str | None = None) -> None:
        """`asked`: what the operator asked for that the engine has not done yet ("stopping…")."""
        status = run.get("status") or "loading"
        if health.dead:
            status = "dead" if status != "crashed" else status
        style = STATUS_STYLE.get(status, "$text-error")
        parts: list[Content | str] = [
            Content.styled(f"● {status_text(status, run.get('activity'), asked, health.dead)}", f"bold {style}"),
            f"  {run.get('name') or ''}",
            f"  step {run.get('step') or 0}/{run.get('steps_total') or '?'}",
            f"  policy v{fmt(run.get('policy_version'), 'd')}",
            f"  harness v{fmt(run.get('harness_version'), 'd')}",
            f"  val {fmt(run.get('val_acc'))} · test {fmt(run.get('test_acc', run.get('heldout_acc')))}",
            Content.styled(f"  auto-promote {'on' if run.get('auto_promote') else 'off'}",
                           "$text-warning" if run.get("auto_promote") else "$text-muted"),
        ]
        self.update(Content.assemble(*parts))


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
