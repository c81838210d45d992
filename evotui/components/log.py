"""Log: what the engine said (the events table, errors in red) and the tail of engine.log."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import Log, RichLog

from evotui.components.run_screen import RunScreen

LEVEL_STYLE = {"error": "bold red", "critical": "bold red", "warning": "yellow", "debug": "dim"}


def event_line(e: dict) -> Text:
    """'09:30:01 step 5 warning backtest  message' with the level coloured."""
    style = LEVEL_STYLE.get(e.get("level") or "", "")
    line = Text(f"{str(e.get('ts') or '')[11:19]} ", style="dim")
    line.append(f"{'' if e.get('step') is None else e['step']:>4} ", style="dim")
    line.append(f"{(e.get('level') or ''):<7} ", style=style or "green")
    line.append(f"{(e.get('kind') or ''):<9} ", style="cyan")
    line.append(str(e.get("message") or ""), style=style if style != "dim" else "")
    return line


class LogScreen(RunScreen):
    """Events above (appended as they come), engine.log below."""

    TOPICS = frozenset({"events", "log"})
    AUTO_FOCUS = "#l-events"
    BINDINGS = [
        Binding("e", "errors_only", "Errors only", tooltip="Show only warnings and errors (toggle)"),
        Binding("end", "tail", "Tail", show=False, tooltip="Scroll both logs to the end"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.last_event = 0
        self.errors_only = False
        self.log_lines: list[str] | None = None

    def compose_body(self):
        with Container(id="l-split"):
            yield RichLog(id="l-events", wrap=False, markup=False, max_lines=5000)
            yield Log(id="l-engine", max_lines=1000)

    def on_mount(self) -> None:
        self.query_one("#l-events").border_title = "events"
        self.query_one("#l-engine").border_title = "engine.log"

    def update_body(self, changed: set[str]) -> None:
        events = self.query_one(RichLog)
        for e in self.app.state.events:
            if e["id"] > self.last_event:
                self.last_event = e["id"]
                if not self.errors_only or e.get("level") in ("warning", "error", "critical"):
                    events.write(event_line(e))
        if not self.app.state.events:
            events.border_subtitle = "none yet: the engine records its start, evaluations, rounds and commands here"
        else:
            events.border_subtitle = ""
        if self.app.state.log_lines is not self.log_lines:
            self.log_lines = self.app.state.log_lines
            engine = self.query_one(Log)
            engine.clear()
            engine.write_lines(self.log_lines)

    def action_errors_only(self) -> None:
        self.errors_only = not self.errors_only
        self.query_one(RichLog).clear()
        self.query_one("#l-events").border_title = "events (warnings and errors)" if self.errors_only else "events"
        self.last_event = 0
        self.update_body({"events"})

    def action_tail(self) -> None:
        self.query_one(RichLog).scroll_end(animate=False)
        self.query_one(Log).scroll_end(animate=False)
