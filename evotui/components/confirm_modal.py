"""Ask before an action changes a live run, and say why a refused action was refused.

Both are modal and take the keyboard: while one is open, typed text goes
nowhere (the app's own keys are off too, see `EvoApp.check_action`), so a
reason typed after a refused action never fires a command. The safe choice
has the focus: Enter on its own cancels; confirming takes a move to the
confirm button (Tab, ← →) and Enter, or a click.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Key
from textual.screen import ModalScreen
from textual.widgets import Button, Label

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 72; height: auto; padding: 1 2; background: $panel; border: thick {border}; }}
{name} Label {{ width: 100%; margin-bottom: 1; }}
{name} #title {{ text-style: bold; }}
{name} Horizontal {{ height: auto; align-horizontal: right; }}
{name} Button {{ margin-left: 1; }}
"""
_MOVES = {"tab", "shift+tab", "left", "right", "enter", "escape", "space"}


class _KeyboardTrap(ModalScreen):
    """A modal that swallows every key it does not use."""

    def on_key(self, event: Key) -> None:
        if event.key not in _MOVES:
            event.stop()
            event.prevent_default()

    def action_focus_other(self) -> None:
        self.focus_next()


class ConfirmModal(_KeyboardTrap):
    """Returns True when the operator confirms, False otherwise."""

    DEFAULT_CSS = _CSS.format(name="ConfirmModal", border="$warning")
    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("left,right", "focus_other", "Other button", show=False)]

    def __init__(self, title: str, message: str, confirm: str = "Confirm") -> None:
        super().__init__()
        self.title_text, self.message, self.confirm_label = title, message, confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, id="title")
            yield Label(self.message, id="message")
            yield Label("Esc or Enter cancels; Tab then Enter confirms.", classes="hint")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button(self.confirm_label, id="confirm", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)


class RefusedModal(_KeyboardTrap):
    """Why an action was refused; Enter or Esc closes it. Returns None."""

    DEFAULT_CSS = _CSS.format(name="RefusedModal", border="$error")
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text, self.message = title, message

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, id="title")
            yield Label(self.message, id="message")
            with Horizontal():
                yield Button("OK", id="ok")

    def on_mount(self) -> None:
        self.query_one("#ok", Button).focus()

    @on(Button.Pressed)
    def action_close(self) -> None:
        self.dismiss(None)
