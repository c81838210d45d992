"""Soak: stop the engine (SIGTERM, kill -9) and resume, and check that nothing is lost or doubled.

Two soaks, both on a tiny random Llama (what they check is the store, not the model). Random
kills of a run: CI runs a few (EVOTUI_SOAK_KILLS, default 3); the full soak is
`EVOTUI_SOAK_KILLS=30 .venv/bin/pytest tests/test_soak.py -q -s`. And stops placed inside an
auto-promoting run's evolution: a round, a probe, just after a promotion and just after a
rollback, each once by SIGTERM and once by SIGKILL, found by watching what the engine records
(its activity, the harness versions), each followed by `--resume`.
"""

import os
import random
import signal
import subprocess
import sys
import time

from backend.store import Store, integrity_ok
import engine_waits
from conftest import set_flags
from engine_waits import communicate, wait_for
from soak_checks import assert_stored_once


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
    """Until the process has written its first events, or exited (then the loop below sees it)."""
    wait_for("the engine's first events", lambda: _events(run) > before or proc.poll() is not None, proc)


def test_random_kills_lose_nothing(tmp_path, tiny_overrides, tiny_model):
    kills = int(os.environ.get("EVOTUI_SOAK_KILLS", "3"))
    steps = max(12, kills + 3)  # a tiny random Llama's step is short: enough steps that kills land
    run = tmp_path / "run"
    sets = set_flags(*tiny_overrides, f"model.name='{tiny_model}'")
    # evolution every 2 steps so kills also land in rounds, promotions and backtests
    sets += set_flags("evolve.every=2", "evolve.candidates=2", "evolve.probe_tasks=1")
    # completions of 8 tokens, not TINY's 24 (answers: 16): what is checked is the rows, not their
    # text, and a step takes half the time
    sets += set_flags("train.max_new_tokens_cap=8", "eval.max_new_tokens=8")
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
    _, err = communicate(proc)
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


# ------------------------------------------------------------------ stops inside evolution
STOPS = [("promotion", signal.SIGKILL), ("rollback", signal.SIGKILL), ("evaluation", signal.SIGTERM),
         ("round", signal.SIGKILL), ("probe", signal.SIGTERM)]
"""Where each stop lands, in order, and how: the run trains on until the phase comes. Left alone,
the run promotes in rounds 2 and 6, and the evaluations at steps 4 and 8 roll those back; every
round probes. The stop during the evaluation at step 8 is the path that crashed a resumed GPU run:
the resumed engine evaluates again, rolls back to the checkpoint of step 6 while steps 7 and 8
saved newer ones, and trains on from it (`UNIQUE constraint failed: policy_versions.id` when the
engine numbered the next version after the restored one)."""
STOPS_FULL = STOPS + [("promotion", signal.SIGTERM), ("rollback", signal.SIGTERM), ("evaluation", signal.SIGKILL),
                      ("round", signal.SIGTERM), ("probe", signal.SIGKILL)]
"""EVOTUI_SOAK_FULL=1: every phase by both signals (a few minutes: later promotions take more steps)."""

EVOLVING = ["train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=8", "eval.n_val=8",
            "eval.n_test=8", "eval.max_new_tokens=8", "model.threads=1", "train.keep_checkpoints=0",
            # a round after every step, six candidates (the offline list reaches a prompt change, which
            # only a probe judges), an evaluation every other step that rolls back whatever it judges
            # (a drop of more than -1: any), and a gate a small replay gain passes
            "eval.every=2", "evolve.every=1", "evolve.candidates=6", "evolve.probe_tasks=1",
            "evolve.rollback_drop=-1", "evolve.min_gain=0", "evolve.min_effect=0.01", "evolve.cooldown_rounds=0",
            # two groups of two: a reward change that leaves one of them training must still pass
            "evolve.min_trained_groups=0",
            # a few held-out problems never move measurably, so the search memory would hold every move
            # after its second try and the run would stop promoting
            "evolve.search_memory=false"]
FIRST_STEPS, MORE_STEPS, MOST_STEPS = 12, 4, 40


def _in_phase(run, phase: str, before: dict[str, int]) -> bool:
    """Whether the engine is in `phase` now: a round, one of its probes, or an evaluation that
    will judge a promotion, by the activity it records (the TUI's header shows the same); a
    promotion or a rollback by the harness version it has just written (each one transaction:
    the stop lands right after it, before the engine has applied it to itself)."""
    if phase in ("promotion", "rollback"):
        return _counts(run)[phase] > before[phase]
    activity = engine_waits.scalar(run, "SELECT activity FROM runs", default="")
    if phase == "evaluation":
        return activity.startswith("held-out eval") and engine_waits.scalar(
            run, "SELECT count(*) FROM interventions WHERE status = 'promoted' AND judged_step IS NULL AND "
                 "promoted_step < (SELECT max(step) FROM steps)", default=0) > 0
    probing = ": probing" in activity
    return activity.startswith("round at step") and (probing if phase == "probe" else not probing)


def _reaches(proc, run, phase: str, before: dict[str, int]) -> bool:
    """Wait until the engine is in `phase` (True) or has exited without getting there (False)."""
    wait_for(f"a {phase}, or the end of the run", lambda: proc.poll() is not None or _in_phase(run, phase, before),
             proc)
    return _in_phase(run, phase, before)


def _counts(run) -> dict[str, int]:
    return {"promotion": engine_waits.scalar(run, "SELECT count(*) FROM harness_versions WHERE intervention_id "
                                                  "IS NOT NULL", default=0),
            "rollback": engine_waits.scalar(run, "SELECT count(*) FROM harness_versions WHERE status = "
                                                 "'rolled_back'", default=0)}


def test_stops_inside_rounds_probes_promotions_and_rollbacks_lose_nothing(tmp_path, tiny_model, spread_harness):
    run = tmp_path / "run"
    sets = set_flags(*EVOLVING, f"model.name='{tiny_model}'", f"harness='{spread_harness}'")
    steps = FIRST_STEPS
    proc = _spawn(["--steps", str(steps), "--run-dir", str(run), *sets])
    before, landed = _counts(run), []
    for phase, sig in STOPS_FULL if os.environ.get("EVOTUI_SOAK_FULL") == "1" else STOPS:
        while not _reaches(proc, run, phase, before):
            _, err = communicate(proc)  # it finished first: train on
            assert proc.returncode == 0, err[-2000:]
            assert steps < MOST_STEPS, f"no {phase} in {steps} steps; stops so far {landed}"
            steps += MORE_STEPS
            proc, before = _spawn(["--resume", str(run), "--steps", str(steps)]), _counts(run)
        os.kill(proc.pid, sig)
        _, err = communicate(proc)
        status = Store.open(run, readonly=True).run()["status"]
        landed.append((phase, sig.name, engine_waits.last_step(run), status))
        assert integrity_ok(run / "run.db")
        if sig == signal.SIGTERM:  # a clean stop with the state saved (or the run's end, if it came first)
            assert status in ("stopped", "finished") and "Traceback" not in err, (landed, err[-2000:])
        proc, before = _spawn(["--resume", str(run)]), _counts(run)
    _, err = communicate(proc)
    assert proc.returncode == 0, (landed, err[-2000:])
    assert Store.open(run, readonly=True).run()["status"] == "finished", landed
    assert_stored_once(run, steps, per_step=4)
    print(f"soak: stops {landed}; {steps} steps, nothing lost or doubled")
