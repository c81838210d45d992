"""Ask before an action changes a live run, and say why a refused action was refused.

Both are dialogs (components/dialog.py) and take the keyboard: while one is
open, typed text goes nowhere (the app's own keys are off too, see
`EvoApp.check_action`), so a reason typed after a refused action never fires a
command. The safe choice has the focus: Enter on its own cancels; confirming
takes a move to the confirm button (Tab, ← →) and Enter, or a click.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label

from evotui.components.dialog import Dialog

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 72; max-width: 100%; height: auto; padding: 1 2; background: $panel;
                    border: thick {border}; }}
{name} Label {{ width: 100%; margin-bottom: 1; }}
{name} #title {{ text-style: bold; }}
{name} Horizontal {{ height: auto; align-horizontal: right; }}
{name} Button {{ margin-left: 1; }}
"""


class ConfirmModal(Dialog[bool]):
    """Returns True when the operator confirms, False otherwise."""

    DEFAULT_CSS = _CSS.format(name="ConfirmModal", border="$warning")
    HINT = "Esc or Enter cancels; Tab then Enter confirms."

    def __init__(self, title: str, message: str, confirm: str = "Confirm") -> None:
        super().__init__()
        self.title_text, self.message, self.confirm_label = title, message, confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, id="title")
            yield Label(self.message, id="message")
            yield Label(self.HINT, classes="hint")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button(self.confirm_label, id="confirm", variant="warning")

    def choose(self, button_id: str) -> None:
        self.dismiss(button_id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)


class RefusedModal(Dialog[None]):
    """Why an action was refused; Enter or Esc closes it. Returns None."""

    DEFAULT_CSS = _CSS.format(name="RefusedModal", border="$error")
    HINT = "Enter or Esc closes this."

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text, self.message = title, message

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, id="title")
            yield Label(self.message, id="message")
            with Horizontal():
                yield Button("OK", id="ok")
