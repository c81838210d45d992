"""`?`: the keys of the screen you are on, the app's keys, and where the palette is."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from evotui.components.dialog import Dialog
from evotui.components.screens import SCREEN_TITLES

ABOUT = (
    "evotui reads the run database and writes only commands, checked at once as the CLI checks "
    "them. Pause and stop take effect at the engine's next checkpoint (a generation or evaluation "
    "batch, a candidate); approve, veto and auto-promote between two steps. a, p, P and S ask first; "
    "a command shows as pending until the engine acknowledges it."
)


def key_rows(bindings: list) -> list[Content]:
    rows = []
    for b in bindings:
        if isinstance(b, Binding) and b.description and not b.action.startswith("show("):
            key = b.key_display or b.key
            rows.append(Content.assemble(Content.styled(f"  {key:>10}  ", "bold $text-accent"), b.description,
                                         Content.styled(f"  {b.tooltip}" if b.tooltip else "", "$text-muted")))
    return rows


def help_text(screen: Screen, app_bindings: list) -> Content:
    title = type(screen).__name__.replace("Screen", "")
    lines = [Content.styled(f"{title} keys", "bold"), *key_rows(getattr(screen, "BINDINGS", [])),
             Content(""), Content.styled("Screens", "bold")]
    lines += [Content.assemble(Content.styled(f"  {i:>10}  ", "bold $text-accent"), name)
              for i, name in enumerate(SCREEN_TITLES.values(), 1)]
    lines += [Content(""), Content.styled("Everywhere", "bold"), *key_rows(app_bindings),
              Content.assemble(Content.styled(f"  {'ctrl+p':>10}  ", "bold $text-accent"),
                               "command palette: every action above, by name"),
              Content(""), Content.styled(ABOUT, "$text-muted")]
    return Content("\n").join(lines)


class HelpScreen(Dialog[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        padding: 1 2; background: $panel; border: thick $accent;
    }
    HelpScreen Static { height: auto; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "cancel", "Close", priority=True)]
    FIRST_FOCUS = "VerticalScroll"

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.for_screen = screen

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "help"
            yield Static(help_text(self.for_screen, list(self.app.BINDINGS)))
