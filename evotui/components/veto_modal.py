"""Ask for the reason of a veto (the engine records it with the intervention)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label


class VetoModal(ModalScreen[str | None]):
    """Returns the reason, or None when cancelled."""

    DEFAULT_CSS = """
    VetoModal { align: center middle; }
    VetoModal > Vertical {
        width: 64; height: auto; padding: 1 2; background: $panel; border: thick $error;
    }
    VetoModal Label { margin-bottom: 1; }
    VetoModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    VetoModal Button { margin-left: 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, iid: int, title: str) -> None:
        super().__init__()
        self.iid = iid
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Veto intervention {self.iid}: {self.title_text}")
            yield Input(placeholder="why (recorded with the intervention)", id="reason")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Veto", id="veto", variant="error")

    @on(Input.Submitted)
    @on(Button.Pressed, "#veto")
    def _veto(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self.query_one("#reason", Input).border_title = "a reason is required"
            self.notify("Say why, so the proposer can learn from it.", severity="warning")
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
