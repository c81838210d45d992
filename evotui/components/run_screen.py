"""The base of every screen: status bar and engine banner on top, the body, the footer.

Screens are redrawn from the app's `RunState` when a poll changed one of the
topics they show (`TOPICS`), and fully when they come back into view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import Worker

from evotui.components.engine_banner import EngineBanner
from evotui.components.key_footer import KeyFooter
from evotui.components.run_state import TOPICS
from evotui.components.status_bar import RunStatusBar

if TYPE_CHECKING:
    from evotui.app import EvoApp


class RunScreen(Screen):
    """A screen of the run. Subclasses implement `compose_body` and `update_body`."""

    TOPICS: frozenset[str] = TOPICS
    app: "EvoApp"

    def compose(self) -> ComposeResult:
        yield RunStatusBar()
        yield EngineBanner()
        yield from self.compose_body()
        yield KeyFooter()

    def compose_body(self) -> Iterable[Widget]:
        return ()

    def on_screen_resume(self) -> None:
        self.refresh_state(set(TOPICS))

    def refresh_state(self, changed: set[str]) -> None:
        """Redraw what `changed` touches (called by the app after every poll)."""
        if not self.is_mounted or not self.app.state.loaded:
            return
        self.query_one(RunStatusBar).show(self.app.state.run, self.app.health, self.app.asked_control())
        self.query_one(EngineBanner).show(self.app.health)
        if changed & self.TOPICS:
            self.update_body(changed)

    def update_body(self, changed: set[str]) -> None:
        """Redraw the body for the changed topics."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.app.report_worker_error(event)
