"""The app's modes: one screen each, imported on first use so the first frame is fast, and
imported ahead (`preload`, in a thread once the first screen shows its data) so that the first
visit of a screen does not wait for its modules (100+ ms for the rollouts screen)."""

from __future__ import annotations

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


def _module(mode: str):
    return import_module(f"evotui.components.{mode}")


def preload() -> None:
    """Import every screen's module (from a worker thread: the UI is not held up)."""
    for mode in _CLASSES:
        _module(mode)


def _factory(mode: str):
    def make():
        return getattr(_module(mode), _CLASSES[mode])()

    make.__name__ = _CLASSES[mode]
    return make


MODES = {mode: _factory(mode) for mode in SCREEN_TITLES}
