"""On quit, when this TUI started the engine: stop the run, or leave it running?"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label

from evotui.components.dialog import Dialog


class QuitModal(Dialog[str | None]):
    """Returns 'stop', 'leave' or None (stay)."""

    DEFAULT_CSS = """
    QuitModal { align: center middle; }
    QuitModal > Vertical { width: 76; max-width: 100%; height: auto; padding: 1 2; background: $panel;
                           border: thick $accent; }
    QuitModal Label { width: 100%; }
    QuitModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    QuitModal Button { margin-left: 1; }
    """
    BINDINGS = [
        Binding("escape", "choose_key('stay')", "Stay", priority=True),
        Binding("s", "choose_key('stop')", "Stop the run", priority=True),
        Binding("l", "choose_key('leave')", "Leave it running", priority=True),
    ]
    HINT = "s stops the run, l leaves it running, Esc stays."

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("This TUI started the run. Stop it, or leave it running in the background?\n"
                        "(attach again later with `evotui open RUN_DIR`)")
            yield Label(self.HINT, classes="hint")
            with Horizontal():
                yield Button("Stay", id="stay")
                yield Button("Stop the run", id="stop", variant="error")
                yield Button("Leave it running", id="leave", variant="primary")

    def choose(self, button_id: str) -> None:
        self.dismiss(None if button_id == "stay" else button_id)

    def action_choose_key(self, button_id: str) -> None:
        self.choose(button_id)
