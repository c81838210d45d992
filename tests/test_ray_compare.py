"""`evotui compare --ray` on a local Ray instance at tiny sizes (backend/tools/compare_ray.py).

Skipped when Ray is not installed: it is an optional extra (`pip install 'evotui[ray]'`),
not in the test extra. Run it with:

    .venv/bin/python -m pip install 'ray>=2.40'
    .venv/bin/python -m pytest -q tests/test_ray_compare.py
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'evotui[ray]')")

from backend.config import load_config  # noqa: E402
from backend.store import Store  # noqa: E402
from backend.tools.compare_ray import run_ray  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402

STEPS = 24


def _cfg(model: str):
    return load_config(None, [
        f"model.name={model}", "model.device=cpu", "model.threads=1", "model.engine=hf", f"steps={STEPS}",
        "train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=6", "eval.n_val=2",
        "eval.n_test=2", "eval.max_new_tokens=4", "eval.every=100"])


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _kill_the_worker_at(run_dir, step: int, killed: list) -> None:
    """Once the run has committed `step`, kill -9 the Ray worker that runs it (the run's parent)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            s = Store.open(run_dir, readonly=True)
            try:
                done, pid = s.last_step(), s.run()["pid"]
            finally:
                s.close()
        except Exception:
            done, pid = 0, None
        if done >= step and pid:
            worker = _ppid(pid)
            os.kill(worker, signal.SIGKILL)
            killed.append((done, worker))
            return
        time.sleep(0.2)


def test_a_lost_worker_is_rerun_from_its_checkpoint(tmp_path, capsys):
    model = save_tiny_llama(tmp_path / "model")
    out = tmp_path / "cmp"
    killed: list = []
    watcher = threading.Thread(target=_kill_the_worker_at, args=(out / "static-s0", 3, killed), daemon=True)
    watcher.start()
    rows = run_ray(_cfg(model), [0], out, arms=["static"])
    watcher.join(5)
    assert killed, "the run ended before the worker could be killed"
    (row,) = rows
    assert row["complete"] and row["steps_done"] == STEPS
    printed = capsys.readouterr().out
    assert "static-s0            started on " in printed and "static-s0            resuming on " in printed
    assert f"step   {STEPS}/{STEPS}" in printed  # the run's lines stream through
    s = Store.open(out / "static-s0", readonly=True)
    try:
        n = s.rows("SELECT COUNT(*) AS n, COUNT(DISTINCT step) AS steps FROM rollouts")[0]
        assert (n["n"], n["steps"]) == (STEPS * 2 * 2, STEPS)  # no step lost, none stored twice
        assert s.run()["device"].startswith("cpu on ")
    finally:
        s.close()
    assert json.loads((out / "compare.json").read_text())[0]["arm"] == "static"


def test_ray_and_jobs_together_is_a_usage_error(capsys):
    from evotui.cli import main

    assert main(["compare", "--ray", "--jobs", "2", "--steps", "1", "--arms", "static", "--seeds", "0"]) == 2
    assert "--ray and --jobs" in capsys.readouterr().err


def test_a_population_and_best_of_n_run_as_ray_tasks(tmp_path, capsys):
    """The group arms on Ray: a population is one task holding its members' slots (its coordinator
    trains them as its own subprocesses, copies and moves between them); best-of-n is N tasks."""
    from backend.population.store import PopulationStore
    from backend.tools.report_population import groups_in

    model = save_tiny_llama(tmp_path / "model")
    cfg = load_config(None, [
        f"model.name={model}", "model.device=cpu", "model.threads=1", "model.engine=hf", "steps=4",
        "train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=6", "eval.n_val=2",
        "eval.n_test=2", "eval.max_new_tokens=4", "eval.every=2", "population.size=2", "population.every=2"])
    out = tmp_path / "cmp"
    rows = run_ray(cfg, [0], out, arms=["population", "best-of-n"])
    by_arm = {r["arm"]: r for r in rows}
    assert set(by_arm) == {"population", "best-of-n"}
    assert all(r["complete"] and r["members"] == 2 for r in rows), rows
    printed = capsys.readouterr().out
    assert "population-s0" in printed and "best-of-n-s0" in printed
    pop = PopulationStore.open(out / "population-s0", readonly=True)
    try:
        assert len(pop.members()) == 2
        assert pop.scores()  # the members were compared on the same validation problems
    finally:
        pop.close()
    assert {(g.arm, len(g.members)) for g in groups_in(out)} == {("population", 2), ("best-of-n", 2)}
