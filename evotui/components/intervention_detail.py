"""One intervention: hypothesis, target, the skills behind it, history, backtests, and its diff."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from evotui.components.diff_view import DiffView, diff_stats
from evotui.components.status_bar import fmt

STATUS_STYLE = {"passed": "bold $text-warning", "promoted": "bold $text-success", "approved": "$text-success",
                "vetoed": "$text-error", "failed": "$text-error", "rolled_back": "$text-error",
                "inconclusive": "$text-warning"}


class InterventionDetail(VerticalScroll):
    """`show(detail, commands)`: a `views.intervention_detail` dict and its operator commands."""

    DEFAULT_CSS = """
    InterventionDetail { padding: 0 1; }
    InterventionDetail Static { height: auto; }
    InterventionDetail .section { color: $text-accent; text-style: bold; margin-top: 1; }
    InterventionDetail #i-command { color: $text-warning; }
    """

    def compose(self) -> ComposeResult:
        yield Static("Select an intervention.", id="i-head")
        yield Static("", id="i-command")
        for key, title in (("why", "Hypothesis"), ("backtests", "Backtest"), ("diff", "Harness diff"),
                           ("skills", "Skills that shaped it"), ("history", "History")):
            yield Static(title, id=f"t-{key}", classes="section")
            if key == "diff":
                yield DiffView(id="i-diff")
            else:
                yield Static("", id=f"i-{key}")

    def show(self, d: dict, commands: list[dict]) -> None:
        self.query_one("#i-head", Static).update(head(d))
        self.show_commands(commands)
        self.query_one("#i-why", Static).update(why(d))
        self.query_one("#i-skills", Static).update(skills(d["skills"]))
        self.query_one("#i-history", Static).update(history(d["history"]))
        self.query_one("#i-backtests", Static).update(backtests(d["backtests"]))
        added, removed = diff_stats(d.get("diff") or "")
        self.query_one("#t-diff", Static).update(f"Harness diff  +{added} −{removed}")
        self.query_one(DiffView).show(d.get("diff") or "")

    def scroll_to_diff(self) -> None:
        self.scroll_to_widget(self.query_one("#t-diff"), top=True, animate=False)

    def show_commands(self, commands: list[dict]) -> None:
        """The operator's commands on this intervention: pending, then acknowledged."""
        lines = []
        for c in commands[-3:]:
            state = c["status"] if c["status"] != "pending" else "pending… (the engine applies it at the next step)"
            result = f": {c['result']}" if c.get("result") else ""
            lines.append(f"command #{c['id']} {c['verb']} — {state}{result}")
        widget = self.query_one("#i-command", Static)
        widget.update("\n".join(lines))
        widget.display = bool(lines)


def head(d: dict) -> Content:
    status = d.get("status") or ""
    versions = f"harness v{d.get('parent_version')} → " + (f"v{d['child_version']}" if d.get("child_version")
                                                          else "candidate")
    return Content("\n").join([
        Content.assemble(Content.styled(f"#{d['id']} {d.get('title') or ''}", "bold"), "  ",
                         Content.styled(status, STATUS_STYLE.get(status, "$text-warning"))),
        Content(f"{d.get('kind')} · target {d.get('target')} · round {d.get('round_id')} · "
                f"{d.get('proposer')} proposer · score {fmt(d.get('score'), '+.3f')}"),
        Content(versions + (f" · promoted at step {d['promoted_step']}" if d.get("promoted_step") else "")),
        *([Content.styled(f"reason: {d['reason']}", "$text-muted")] if d.get("reason") else []),
    ])


def why(d: dict) -> Content:
    return Content.assemble(d.get("hypothesis") or "–", "\n",
                            Content.styled("expected: ", "$text-muted"), d.get("expected") or "–")


def skills(items: list) -> Content:
    if not items:
        return Content.styled("none (built-in template)", "$text-muted")
    names = [s.get("name", str(s)) if isinstance(s, dict) else str(s) for s in items]
    return Content(" · ".join(names))


def history(rows: list) -> Content:
    """Status transitions, oldest first ({ts, from, to, reason} rows, or {at, status, note})."""
    out = []
    for h in rows:
        if not isinstance(h, dict):
            out.append(Content(str(h)))
            continue
        status = h.get("to") or h.get("status") or "?"
        when = str(h.get("ts") or h.get("at") or "")[11:19]
        note = h.get("reason") or h.get("note") or ""
        out.append(Content.assemble(Content.styled(f"{when} ", "$text-muted"),
                                    Content.styled(f"{status:<12}", STATUS_STYLE.get(status, "")), note))
    return Content("\n").join(out) if out else Content.styled("–", "$text-muted")


def backtests(rows: list[dict]) -> Content:
    if not rows:
        return Content.styled("not backtested yet", "$text-muted")
    out = []
    for b in rows:
        ok = "$text-success" if b.get("verdict") in ("pass", "passed") else \
            "$text-warning" if b.get("verdict") == "inconclusive" else "$text-error"
        out.append(Content.assemble(Content.styled(f"{b.get('mode')} over {b.get('n_rollouts')} rollouts: ", "bold"),
                                    Content.styled(str(b.get("verdict")), f"bold {ok}"),
                                    f"  {b.get('reason') or ''}  ({fmt(b.get('ms'), '.0f')} ms)"))
        if b.get("effect") is not None:
            out.append(decision_line(b))
        out.extend(metric_line(name, value) for name, value in metric_pairs(b.get("metrics") or {}))
    return Content("\n").join(out)


def decision_line(b: dict) -> Content:
    """The decision's statistics: effect, 95% interval, p-value, paired sample size."""
    under = "  underpowered" if b.get("underpowered") else ""
    return Content.assemble(
        Content.styled(f"  {b.get('metric') or 'effect'}: ", "bold"),
        f"{b['effect']:+.3f}  95% CI [{fmt(b.get('ci_low'), '+.3f')}, {fmt(b.get('ci_high'), '+.3f')}]  "
        f"p {fmt(b.get('p_value'), '.3g')}  n {fmt(b.get('n'), 'd')}",
        Content.styled(under, "$text-warning"))


PAIRS = (("_old", "_new"), ("_before", "_after"))


def metric_pairs(metrics: dict) -> list[tuple[str, object]]:
    """Backtest metrics with `x_old`/`x_new` (or `x_before`/`x_after`) folded into one before → after row."""
    out = []
    for key, value in metrics.items():
        olds = [(old, new) for old, new in PAIRS if key.endswith(old) and key[: -len(old)] + new in metrics]
        for old, new in olds:
            name = key[: -len(old)]
            out.append((name, {"before": value, "after": metrics[name + new]}))
        is_new_half = any(key.endswith(new) and key[: -len(new)] + old in metrics for old, new in PAIRS)
        if not olds and not is_new_half:
            out.append((key, value))
    return out


def metric_line(name: str, value) -> Content:
    if isinstance(value, dict) and "before" in value and "after" in value:
        before, after = value["before"], value["after"]
        delta = after - before if isinstance(before, (int, float)) and isinstance(after, (int, float)) else None
        tail = "" if delta is None else f"  ({delta:+d})" if isinstance(delta, int) else f"  ({delta:+.3f})"
        return Content(f"  {name:<20} {num(before)} → {num(after)}{tail}")
    return Content(f"  {name:<20} {num(value)}")


def num(value) -> str:
    """Integers as integers, other numbers to three places, anything else as compact text."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value if isinstance(value, str) else json.dumps(value)[:60]
    return str(value) if isinstance(value, int) else f"{value:.3f}"
