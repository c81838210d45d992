"""A run directory moved or copied elsewhere (another disk, another host) resumes from its own
checkpoints: the store keeps the path a checkpoint was written at, `Store.checkpoint_of` finds
the folder under the run's own `checkpoints/`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from backend.store import Store, checkpoint_in_run
from conftest import set_flags
from engine_waits import run_process


def test_checkpoint_paths_resolve_inside_the_run_directory():
    run = Path("/disk2/runs/r")
    assert checkpoint_in_run(run, "/home/me/runs/r/checkpoints/step_000004") == run / "checkpoints/step_000004"
    # a copy a population member adopted, and a run kept under a folder itself named checkpoints
    assert checkpoint_in_run(run, "/a/checkpoints/r/checkpoints/copies/e3") == run / "checkpoints/copies/e3"
    assert checkpoint_in_run(run, "checkpoints/step_000001") == run / "checkpoints/step_000001"


def test_a_moved_run_resumes_from_its_own_checkpoints(tmp_path, tiny_overrides, tiny_model, spread_harness):
    first = tmp_path / "first"
    sets = set_flags(*tiny_overrides, f"model.name='{tiny_model}'", f"harness='{spread_harness}'",
                     "evolve.enabled=false")
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--steps", "1", "--run-dir", first,
                     "--quiet", *sets], "the first step")
    assert p.returncode == 0, p.stderr[-2000:]
    moved = tmp_path / "elsewhere" / "run"
    shutil.move(first, moved)
    store = Store.open(moved, readonly=True)
    pv = store.current_policy_version()
    store.close()
    assert pv is not None and pv["checkpoint"].startswith(str(first))  # a trained step, saved where it ran
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--resume", moved, "--steps", "2",
                     "--quiet"], "the resumed step")
    assert p.returncode == 0, p.stderr[-2000:]
    store = Store.open(moved, readonly=True)
    assert [r["step"] for r in store.rows("SELECT step FROM steps ORDER BY step")] == [1, 2]
    assert store.run()["status"] == "finished"
    store.close()
    assert not first.exists()
