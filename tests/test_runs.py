"""The run lifecycle (backend/runs.py): flags given with --resume reach the runs row.

The engine is replaced by a stand-in that trains nothing, so these run in a moment; what is
checked is what `evotui run --headless --resume` writes before the engine starts.
"""

from __future__ import annotations

import pytest

from backend.store import Store
from evotui.cli import main
from tui_fixtures import build_run


class IdleEngine:
    """Stands in for backend.loop.Engine: records the config it was given, trains nothing."""

    seen: list = []

    def __init__(self, run_dir, cfg, store, quiet=False, lm=None, dist=None):
        self.run_dir, self.cfg = run_dir, cfg
        IdleEngine.seen.append(cfg)

    def run(self) -> None:
        pass


@pytest.fixture
def stopped_run(tmp_path, monkeypatch):
    import backend.loop

    monkeypatch.setattr(backend.loop, "Engine", IdleEngine)
    IdleEngine.seen = []
    return build_run(tmp_path / "run", status="stopped")


def auto_promote(run_dir) -> int:
    store = Store.open(run_dir, create=False)
    try:
        return store.run()["auto_promote"]
    finally:
        store.close()


def test_resume_with_auto_promote_writes_it_to_the_runs_row(stopped_run, capsys):
    assert auto_promote(stopped_run) == 0
    assert main(["run", "--headless", "--resume", str(stopped_run), "--auto-promote", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 1
    assert IdleEngine.seen[-1].evolve.auto_promote is True


def test_resume_supervised_turns_it_off(stopped_run):
    Store.open(stopped_run, create=False).set_run(auto_promote=1)
    assert main(["run", "--headless", "--resume", str(stopped_run), "--supervised", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 0


def test_resume_without_the_flag_keeps_the_operators_choice(stopped_run):
    Store.open(stopped_run, create=False).set_run(auto_promote=1)  # toggled in the TUI while it ran
    assert main(["run", "--headless", "--resume", str(stopped_run), "--steps", "30", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 1
    store = Store.open(stopped_run, create=False)
    assert store.run()["steps_total"] == 30
    store.close()
