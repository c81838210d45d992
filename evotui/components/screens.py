"""The app's modes: one screen each, imported on first use so the first frame is fast, imported
ahead (`preload`, in a thread once the first screen shows its data) so that a first visit does
not wait for its modules (100+ ms for the rollouts screen), and the busiest screens built ahead
(`prebuild`, in the UI's idle time after that) so that their first visit does not wait for
their widgets either (the rollouts page is budgeted at 100 ms at a million rollouts)."""

from __future__ import annotations

import asyncio
import time
from importlib import import_module

SCREEN_TITLES = {
    "dashboard": "Dashboard", "rollouts": "Rollouts", "diagnoses": "Diagnoses",
    "interventions": "Interventions", "harness": "Harness", "skills": "Skills", "log": "Log",
}
_CLASSES = {
    "dashboard": "DashboardScreen", "rollouts": "RolloutsScreen", "diagnoses": "DiagnosesScreen",
    "interventions": "InterventionsScreen", "harness": "HarnessScreen", "skills": "SkillsScreen",
    "log": "LogScreen",
}
# Built in the background once the first screen shows its data: the rollouts screen has the most
# widgets (table, filter bar, detail pane: ~60 nodes, 150-250 ms to build on a 2-core machine).
PREBUILT = ("rollouts",)
SETTLE_S = 2.0  # the longest a prebuild waits for a screen's first data before laying it out


def _module(mode: str):
    return import_module(f"evotui.components.{mode}")


def preload() -> None:
    """Import every screen's module (from a worker thread: the UI is not held up)."""
    for mode in _CLASSES:
        _module(mode)


async def prebuild(app, mode: str) -> bool:
    """Build `mode`'s screen without showing it: compose and mount it, let its first data and
    deferred widgets come in (`RunScreen.settled`), lay it out and paint it once off screen, so
    that its first visit finds its layout and its widgets' rendered lines ready (on a 2-core
    machine: 150-250 ms of CPU before, ~30 ms after). False when it is built already.

    Textual has no public calls for this: `App._init_mode` is what `switch_mode` runs on a mode's
    first visit, and `_refresh_layout` and the compositor's full update are what it runs to show a
    screen. Should a Textual release rename them, nothing is built ahead and the first visit
    builds the screen as before.
    """
    init, stacks = getattr(app, "_init_mode", None), getattr(app, "_screen_stacks", None)
    if init is None or stacks is None or mode in stacks:
        return False
    await init(mode)
    screen = stacks[mode][0]
    deadline = time.monotonic() + SETTLE_S
    while not screen.settled() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if screen is app.screen or not hasattr(screen, "_refresh_layout"):
        return True  # the operator got there first: Textual shows it the usual way
    for _ in range(2):  # the second pass settles what the first one changed (scrollbars)
        screen._refresh_layout(app.size)
    compositor = getattr(screen, "_compositor", None)
    if compositor is not None and hasattr(compositor, "render_full_update"):
        compositor.render_full_update()  # the frame is dropped; the line caches stay warm
    return True


def _factory(mode: str):
    def make():
        return getattr(_module(mode), _CLASSES[mode])()

    make.__name__ = _CLASSES[mode]
    return make


MODES = {mode: _factory(mode) for mode in SCREEN_TITLES}
