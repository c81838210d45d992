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
    """The run and its model both move (another host); `--set model.name` names the model's new
    path, which the run's log records. A model the checkpoint does not fit is one line, exit 2."""
    from tiny_llama import save_tiny_llama

    model = Path(shutil.copytree(tiny_model, tmp_path / "models" / "tiny"))
    first = tmp_path / "first"
    sets = set_flags(*tiny_overrides, f"model.name='{model}'", f"harness='{spread_harness}'",
                     "evolve.enabled=false")
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--steps", "1", "--run-dir", first,
                     "--quiet", *sets], "the first step")
    assert p.returncode == 0, p.stderr[-2000:]
    moved, moved_model = tmp_path / "elsewhere" / "run", tmp_path / "elsewhere" / "tiny"
    shutil.move(first, moved)
    shutil.move(model, moved_model)
    store = Store.open(moved, readonly=True)
    pv = store.current_policy_version()
    store.close()
    assert pv is not None and pv["checkpoint"].startswith(str(first))  # a trained step, saved where it ran
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--resume", moved, "--steps", "2",
                     "--quiet", "--set", f"model.name='{moved_model}'"], "the resumed step")
    assert p.returncode == 0, p.stderr[-2000:]
    wide = save_tiny_llama(tmp_path / "wide", hidden=48)
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--resume", moved, "--steps", "3",
                     "--quiet", "--set", f"model.name='{wide}'"], "the refused resume")
    err = p.stderr.strip()
    assert p.returncode == 2 and err.startswith("evotui: error: ") and len(err.splitlines()) == 1, err
    assert "does not fit model" in err and "resume with the model the run trained" in err
    store = Store.open(moved, readonly=True)
    assert [r["step"] for r in store.rows("SELECT step FROM steps ORDER BY step")] == [1, 2]
    assert any(f"resumed with model.name '{moved_model}' (the run started with '{model}')" in e["message"]
               for e in store.rows("SELECT message FROM events"))
    store.close()
    assert not first.exists()
