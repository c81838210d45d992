"""One intervention: hypothesis, target, the skills behind it, history, backtests, and its diff."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from evotui.components.backtest_view import backtests
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
        yield Static("", id="i-head")
        yield Static("", id="i-command")
        for key, title in (("why", "Hypothesis"), ("backtests", "Backtest"), ("diff", "Harness diff"),
                           ("skills", "Skills that shaped it"), ("history", "History")):
            yield Static(title, id=f"t-{key}", classes="section body")
            if key == "diff":
                yield DiffView(id="i-diff", classes="body")
            else:
                yield Static("", id=f"i-{key}", classes="body")

    def show_message(self, text: str) -> None:
        """Nothing to show yet: say what will fill this pane and when."""
        self.query_one("#i-head", Static).update(Content.styled(text, "$text-muted"))
        for widget in self.query(".body"):
            widget.display = False

    def show(self, d: dict, commands: list[dict]) -> None:
        for widget in self.query(".body"):
            widget.display = True
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
