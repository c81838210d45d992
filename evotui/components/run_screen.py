"""The base of every screen: status bar and engine banner on top, the body, the footer.

Screens are redrawn from the app's `RunState` when a poll changed one of the
topics they show (`TOPICS`), and fully when they come back into view.
"""

from __future__ import annotations

from typing import Iterable

from textual.app import ComposeResult
from textual.events import ScreenResume
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import Worker

from evotui.components.engine_banner import EngineBanner
from evotui.components.key_footer import KeyFooter
from evotui.components.run_state import TOPICS
from evotui.components.run_view import RunHost
from evotui.components.status_bar import RunStatusBar


class RunScreen(Screen):
    """A screen of the run. Subclasses implement `compose_body` and `update_body`."""

    TOPICS: frozenset[str] = TOPICS
    app: RunHost  # the app, as far as a screen needs it (components/run_view.py)

    def __init__(self) -> None:
        super().__init__()
        # Textual refreshes the whole app's CSS (a reparse of every source and a restyle of every
        # node: 100-300 ms on a busy 2-core machine) when a screen first shows, because a new
        # screen's stamp (-1) differs from the app's. Once a first screen is up, the stylesheet is
        # current and this screen's widgets are styled from it as they are registered, so the
        # stamp says so; a real change (a theme) still bumps the app's count and refreshes all.
        self._style_stamp: tuple | None = None  # style_stamp() when the screen last left or came back
        if _app_shows_a_screen(self.app):
            self._css_update_count = self.app._css_update_count

    def compose(self) -> ComposeResult:
        yield RunStatusBar()
        yield EngineBanner()
        yield from self.compose_body()
        yield KeyFooter()

    def compose_body(self) -> Iterable[Widget]:
        return ()

    def settled(self) -> bool:
        """Its first data and any widgets it builds late are in (a prebuild lays it out then)."""
        return True

    def on_screen_suspend(self) -> None:
        self._style_stamp = style_stamp(self.app)

    def on_screen_resume(self, event: ScreenResume) -> None:
        # Textual restyles every node of a screen each time it comes back (a third of a visit's
        # CPU on the rollouts screen, and it empties the tables' render caches). What a restyle
        # could pick up while the screen was away: a new stylesheet (Textual compares its own
        # stamp and refreshes then anyway) or new app classes (theme, focus, breakpoint); the
        # screen's own classes restyle it when they change. Nothing of it changed: skip it.
        stamp = style_stamp(self.app)
        if self._style_stamp == stamp:
            event.refresh_styles = False
        self._style_stamp = stamp  # styled as of now, restyled or not
        self.refresh_state(set(TOPICS))

    def refresh_state(self, changed: set[str]) -> None:
        """Redraw what `changed` touches (called by the app after every poll)."""
        if not self.is_mounted or not self.app.state.loaded:
            return
        self.query_one(RunStatusBar).show(self.app.state.run, self.app.health, self.app.asked_control(),
                                          self.app.asked_auto_promote())
        self.query_one(EngineBanner).show(self.app.health)
        if changed & self.TOPICS:
            self.update_body(changed)

    def update_body(self, changed: set[str]) -> None:
        """Redraw the body for the changed topics."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.app.report_worker_error(event)


def style_stamp(app) -> tuple:
    """What, outside a screen, its styles depend on (the app's stylesheet version, classes, size)."""
    return app._css_update_count, app.classes, app.pseudo_classes, app.size


def _app_shows_a_screen(app) -> bool:
    try:
        return app.screen.is_mounted
    except Exception:  # no screen yet: the app's first screen, styled by Textual's first refresh
        return False
