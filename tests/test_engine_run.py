"""Real runs at tiny sizes: a short run of the embedded default model, and a kill -9 mid-step
followed by --resume with no duplicate or missing steps (on a tiny random Llama: what it checks
is the store, not the model)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from backend.store import Store, integrity_ok
from conftest import set_flags
from engine_waits import last_step, run_process, wait_for


def evotui(*args, **kw):
    return run_process([sys.executable, "-m", "evotui", *args], **kw)


def test_short_real_run(tmp_path, tiny_overrides):
    run = Path(os.environ["EVOTUI_HOME"]) / "runs" / "first"
    sets = set_flags(*tiny_overrides)
    p = evotui("run", "--headless", "--steps", "2", "--run-dir", str(run), *sets,
               "--set", "evolve.enabled=false")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "test:" in p.stdout and "validation:" in p.stdout and "(finished, 2 of 2 steps" in p.stdout
    s = Store.open(run, readonly=True)
    assert [r["step"] for r in s.rows("SELECT step FROM steps ORDER BY step")] == [1, 2]
    assert s.count("rollouts") == 2 * 2 * 2
    assert s.count("diagnoses") > 0
    assert [(r["step"], r["split"]) for r in s.rows("SELECT step, split FROM evals ORDER BY id")] == \
        [(0, "validation"), (0, "test"), (2, "validation"), (2, "test")]
    # the report's hack-probe audit (echoes, hedges among correct verdicts) reads each stored
    # held-out completion with its question: a result stored without them would go unchecked
    from backend.envs.math_answer import audit

    entries = [e for row in s.evals() for e in json.loads(row["results_json"])]
    assert len(entries) == 8 and all(e["question"] and isinstance(e["completion"], str) for e in entries)
    judged_correct = audit([dict(e, correct=True) for e in entries])
    assert (judged_correct["checked"], judged_correct["unchecked"]) == (8, 0)
    run_row = s.run()
    assert run_row["val_acc"] is not None and run_row["heldout_acc"] == run_row["test_acc"]
    row = s.rows("SELECT * FROM rollouts LIMIT 1")[0]
    assert row["completion_tokens"] > 0 and row["verdict"] in ("correct", "wrong", "no_answer")
    step = s.rows("SELECT * FROM steps WHERE step = 1")[0]
    assert step["gen_ms"] > 0 and step["total_ms"] >= step["gen_ms"]
    assert (run / "config.toml").exists() and (run / "harness.py").exists()
    # one harness semantics: replaying the incumbent over the stored rollouts reproduces
    # exactly the rewards, labels and advantages training stored
    from backend.evolve.replay import mismatches
    from backend.store.rollouts import REPLAY_COLUMNS

    stored = s.rows(f"SELECT {', '.join(REPLAY_COLUMNS)} FROM rollouts ORDER BY id")
    assert all(r["advantage"] is not None for r in stored)
    assert mismatches(stored, s.get("harness_versions", s.run()["harness_version"])["code"]) == []
    listed = evotui("runs")
    assert "finished" in listed.stdout and str(run) in listed.stdout and "2/2" in listed.stdout


def test_kill_mid_step_then_resume(tmp_path, tiny_overrides, tiny_model):
    run = tmp_path / "run"
    sets = set_flags(*tiny_overrides, f"model.name='{tiny_model}'")
    proc = subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--steps", "3", "--run-dir",
                             str(run), *sets, "--set", "evolve.enabled=false", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # however long a loaded machine takes: only a hung engine hits the ceiling
        wait_for("step 1 to be committed", lambda: last_step(run) >= 1, proc, poll_s=0.2)
    except AssertionError:
        proc.kill()
        raise
    os.kill(proc.pid, signal.SIGKILL)  # mid step 2 (or just before it)
    proc.wait()
    assert integrity_ok(run / "run.db")
    p = evotui("run", "--headless", "--resume", str(run), "--quiet")
    assert p.returncode == 0, p.stderr[-2000:]
    s = Store.open(run, readonly=True)
    steps = [r["step"] for r in s.rows("SELECT step FROM steps ORDER BY step")]
    assert steps == [1, 2, 3]
    per_step = s.rows("SELECT step, count(*) n FROM rollouts GROUP BY step ORDER BY step")
    assert [r["n"] for r in per_step] == [4, 4, 4]
    assert s.run()["status"] == "finished"
    assert integrity_ok(run / "run.db")
