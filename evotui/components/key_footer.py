"""Textual's footer, rebuilt only when the keys it shows change.

Textual's `Footer` recomposes (a widget per key, styles applied to each) on every
bindings update: each focus move and each screen switch. Here it does so only when
the shown keys, their labels or their enabled state differ from what it shows,
which takes the footer out of most screen switches (a screen's first page is
budgeted at 100 ms).
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


def shown_keys(screen: Screen) -> tuple:
    """What a footer on `screen` would show: (key, action, description, enabled, tooltip) per key."""
    return tuple((b.key, b.action, b.description, enabled, tooltip)
                 for _, b, enabled, tooltip in screen.active_bindings.values() if b.show)


class KeyFooter(Footer):
    """A `Footer` that skips rebuilding when its keys are unchanged."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple | None = None

    def bindings_changed(self, screen: Screen) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            keys = shown_keys(screen)
            if keys == self._shown:
                return
            self._shown = keys
        super().bindings_changed(screen)
