"""Ask for the reason of a veto (the engine records it with the intervention)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label

from evotui.components.dialog import Dialog


class VetoModal(Dialog[str | None]):
    """Returns the reason, or None when cancelled. Enter in the field vetoes."""

    DEFAULT_CSS = """
    VetoModal { align: center middle; }
    VetoModal > Vertical {
        width: 64; max-width: 100%; height: auto; padding: 1 2; background: $panel; border: thick $error;
    }
    VetoModal Label { margin-bottom: 1; }
    VetoModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    VetoModal Button { margin-left: 1; }
    """
    FIRST_FOCUS = "#reason"

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

    def choose(self, button_id: str) -> None:
        self.submit() if button_id == "veto" else self.dismiss(None)

    def submit(self) -> None:
        field = self.query_one("#reason", Input)
        reason = field.value.strip()
        if not reason:
            field.border_title = "a reason is required"
            field.focus()
            return
        self.dismiss(reason)
