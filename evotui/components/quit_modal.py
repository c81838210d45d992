"""On quit, when this TUI started the engine: stop the run, or leave it running?"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitModal(ModalScreen[str | None]):
    """Returns 'stop', 'leave' or None (stay)."""

    DEFAULT_CSS = """
    QuitModal { align: center middle; }
    QuitModal > Vertical { width: 76; height: auto; padding: 1 2; background: $panel; border: thick $accent; }
    QuitModal Label { width: 100%; }
    QuitModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    QuitModal Button { margin-left: 1; }
    """
    BINDINGS = [
        Binding("escape", "choose('')", "Stay"),
        Binding("s", "choose('stop')", "Stop the run"),
        Binding("l", "choose('leave')", "Leave it running"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("This TUI started the run. Stop it, or leave it running in the background?\n"
                        "(attach again later with `evotui open RUN_DIR`)")
            with Horizontal():
                yield Button("Stay", id="stay")
                yield Button("Stop the run", id="stop", variant="error")
                yield Button("Leave it running", id="leave", variant="primary")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_choose("" if event.button.id == "stay" else event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice or None)
