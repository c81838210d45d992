"""Soak: kill -9 the engine at random moments, resume, and check nothing is lost.

CI runs a few kills (EVOTUI_SOAK_KILLS, default 3); the full soak is
`EVOTUI_SOAK_KILLS=30 .venv/bin/pytest tests/test_soak.py -q -s`.
"""

import os
import random
import signal
import subprocess
import sys
import time

from backend.store import Store, integrity_ok


def _spawn(args):
    return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _events(run) -> int:
    """Events the run's database holds (0 before it exists): an engine writes its first ones once
    its model is loaded, so a count above the one at spawn time means the new process is at work."""
    try:
        return int(Store.open(run, readonly=True).scalar("SELECT count(*) FROM events"))
    except Exception:
        return 0


def _until_at_work(proc, run, before: int) -> None:
    deadline = time.time() + 300
    while _events(run) <= before and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)


def test_random_kills_lose_nothing(tmp_path, tiny_overrides):
    kills = int(os.environ.get("EVOTUI_SOAK_KILLS", "3"))
    steps = max(4, kills + 3)
    run = tmp_path / "run"
    sets = [x for o in tiny_overrides for x in ("--set", o)]
    # evolution every 2 steps so kills also land in rounds, promotions and backtests
    sets += ["--set", "evolve.every=2", "--set", "evolve.candidates=2", "--set", "evolve.probe_tasks=1"]
    # completions of 8 tokens, not TINY's 24 (answers: 16): what is checked is the rows, not their
    # text, and a step takes half the time
    sets += ["--set", "train.max_new_tokens_cap=8", "--set", "eval.max_new_tokens=8"]
    rng = random.Random(int(os.environ.get("EVOTUI_SOAK_SEED", "7")))
    survived = 0
    proc, before = _spawn(["--steps", str(steps), "--run-dir", str(run), *sets]), 0
    for _ in range(kills):
        if rng.random() > 0.15:  # mostly kill once the engine is up; sometimes during start-up
            # a resumed process finds run.db already there: wait for its own first events (after
            # imports and the model load), or a kill lands in its imports every time
            _until_at_work(proc, run, before)
            time.sleep(rng.uniform(0.5, 4.0))  # generation, training, a round, the store
        else:
            time.sleep(rng.uniform(0.1, 3.0))
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if (run / "run.db").exists():
            assert integrity_ok(run / "run.db")
            survived += 1
            before = _events(run)
            proc = _spawn(["--resume", str(run)])
        else:  # killed before the run existed: nothing was half-made
            assert not any(p.name.startswith(run.name) for p in tmp_path.iterdir() if p.name != run.name
                           and not p.name.startswith("."))
            before = 0
            proc = _spawn(["--steps", str(steps), "--run-dir", str(run), *sets])
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-2000:]
    s = Store.open(run, readonly=True)
    assert [r["step"] for r in s.rows("SELECT step FROM steps ORDER BY step")] == list(range(1, steps + 1))
    counts = {r["n"] for r in s.rows("SELECT count(*) n FROM rollouts GROUP BY step")}
    assert counts == {4}
    # every rollout and diagnosis belongs to a committed step: nothing half-written
    assert s.scalar("SELECT count(*) FROM rollouts WHERE step NOT IN (SELECT step FROM steps)") == 0
    assert s.scalar("SELECT count(*) FROM diagnoses WHERE rollout_id NOT IN (SELECT id FROM rollouts)") == 0
    # each step's policy version has its checkpoint on disk
    for pv in s.rows("SELECT * FROM policy_versions"):
        assert os.path.isdir(pv["checkpoint"])
    # the active harness version exists and matches the file the engine keeps
    hv = s.get("harness_versions", s.run()["harness_version"])
    assert (run / "harness.py").read_text() == hv["code"]
    assert s.run()["status"] == "finished"
    assert integrity_ok(run / "run.db")
    print(f"soak: {survived} kills survived, {steps} steps, 0 rows lost")
