"""The app's modes: one screen each, imported on first use so the first frame is fast."""

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


def _factory(mode: str):
    def make():
        return getattr(import_module(f"evotui.components.{mode}"), _CLASSES[mode])()

    make.__name__ = _CLASSES[mode]
    return make


MODES = {mode: _factory(mode) for mode in SCREEN_TITLES}
