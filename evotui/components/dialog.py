"""The one guard every dialog of the app shares: it closes once, and a key reaches one screen.

The app's key gate (components/key_gate.py) hands a dialog each key the moment
it takes it from the terminal, in order, and the dialog answers it there and
then: its own keys (Tab, arrows, Enter, Esc, its shortcuts) are priority
bindings, a character goes into the focused input field, any other key to the
focused control's bindings. So Enter on a button closes the dialog at once and
the next key already goes to the screen underneath, and Enter in a field
submits the text typed before it. `dismiss` works once; a second click or key
on a closing dialog does nothing (a second pop would take the screen under it,
or crash the app). Keys that arrive before the dialog has mounted and focused
its first control wait in the gate until it posts `DialogChanged`. A character
the dialog has no use for is dropped, and its hint line says so.

    class AskName(Dialog[str | None]):
        def choose(self, button_id: str) -> None: ...
"""

from __future__ import annotations

from typing import TypeVar

from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.actions import SkipAction
from textual.events import Key
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from evotui.messages import DialogChanged

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    """A modal that dismisses once and answers its keys as they arrive. Subclasses implement
    `choose(button_id)` (Enter or a click on a button) and may set `FIRST_FOCUS`."""

    FIRST_FOCUS = "Button"
    # Toasts keep to the top rows over a dialog (Textual stacks them at the bottom right, over the
    # buttons), one at a time.
    DEFAULT_CSS = """
    Dialog ToastRack { dock: top; align: right top; max-height: 6; margin-bottom: 0; }
    """
    BINDINGS = [
        Binding("tab", "move(1)", "Next", show=False, priority=True),
        Binding("shift+tab", "move(-1)", "Previous", show=False, priority=True),
        Binding("left,up", "move_button(-1)", "Previous button", show=False, priority=True),
        Binding("right,down", "move_button(1)", "Next button", show=False, priority=True),
        Binding("enter", "activate", "Choose", show=False, priority=True),
        Binding("escape", "cancel", "Cancel", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.ready = False  # mounted, first control focused: keys may reach it
        self.closing = False  # dismissed: it takes no more keys or clicks

    def on_mount(self) -> None:
        self.set_focus(self.query(self.FIRST_FOCUS).first())  # now, not after the next refresh
        self.ready = True
        self.app.post_message(DialogChanged())

    # ------------------------------------------------------------ closing, once
    def dismiss(self, result: ResultT | None = None) -> AwaitComplete:
        if self.closing or self.app.screen is not self:
            return AwaitComplete.nothing()
        self.closing = True
        self.app.post_message(DialogChanged())
        return super().dismiss(result)

    def choose(self, button_id: str) -> None:
        """A button was chosen (Enter on it, or a click)."""
        self.dismiss(None)

    def submit(self) -> None:
        """Enter in an input field."""

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:  # a click (keys choose at once)
        event.stop()
        if not self.closing:
            self.choose(event.button.id or "")

    # ------------------------------------------------------------ keys, as they arrive
    def action_activate(self) -> None:
        focused = self.focused
        if isinstance(focused, Button):
            self.choose(focused.id or "")
        elif isinstance(focused, Input):
            self.submit()


    def action_move(self, direction: int) -> None:
        self.focus_next() if direction > 0 else self.focus_previous()

    def action_move_button(self, direction: int) -> None:
        if not isinstance(self.focused, Button):
            raise SkipAction()  # the cursor of an input field
        self.action_move(direction)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return not self.closing  # a closing dialog takes no more keys

    def key_unused(self, key: Key) -> None:
        """A key none of the dialog's controls uses: a character is dropped, and the hint line says so."""
        if not key.is_printable:
            return
        for hint in self.query("Label.hint").results(Label):
            hint.update(f"'{key.character or key.key}' does nothing here. {self.HINT}")

    HINT = ""
    """What the hint line (a `Label` with class `hint`) says: the dialog's keys."""
