"""A copy-only population from the command line: SIGTERM in a segment stops it with every member
saved, `--resume POP` finishes it, the member behind copied the other and no harness ever moved.
Also: the operator's approve and veto of supervised moves, and bad population input."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import UsageError
from backend.evolve import interventions as iv
from backend.evolve.interventions import Candidate
from backend.population import approve, coordinator, veto
from backend.population.store import Evidence, MoveChange, Planned, PopulationStore
from backend.store import Store

from engine_waits import communicate, last_step, wait_for
from population_models import EVERY, GROUP, STEPS, TASKS, make_population, model_and_harness  # noqa: F401
from soak_checks import _evals_and_rounds, _harness_versions, _steps_and_rollouts


def evotui(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evotui", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_sigterm_in_a_segment_then_resume_finishes_a_copy_only_population(tmp_path, model_and_harness):  # noqa: F811
    pop = tmp_path / "pop"
    make_population(pop, model_and_harness, "copy")
    first = evotui("run", "--headless", "--resume", str(pop), "--jobs", "2")
    wait_for("a member's first committed step", lambda: last_step(pop / "m0") >= 1 or last_step(pop / "m1") >= 1,
             first)
    first.send_signal(signal.SIGTERM)
    out, err = communicate(first)
    assert first.returncode == 0, err
    ps = PopulationStore.open(pop, readonly=True)
    stopped = ps.population()
    ps.close()
    assert stopped.status == "stopped" and stopped.step < STEPS, (stopped, out)
    assert "population stopped" in out

    again = evotui("run", "--headless", "--resume", str(pop), "--jobs", "2")
    out, err = communicate(again)
    assert again.returncode == 0, err
    assert f"step {STEPS}: validation n=32" in out and "population finished" in out, out
    ps = PopulationStore.open(pop, readonly=True)
    events, pop_row = ps.events(), ps.population()
    ps.close()
    assert pop_row.status == "finished" and pop_row.step == STEPS
    assert [(e.kind, e.member, e.parent, e.status) for e in events] == [("copy", 1, 0, "applied")]
    codes = set()
    for m in ("m0", "m1"):
        s = Store.open(pop / m, readonly=True)
        try:
            _steps_and_rollouts(s, STEPS, TASKS * GROUP)
            _harness_versions(s, pop / m)
            _evals_and_rounds(s)
            codes |= {v["code"] for v in s.harness_versions()}
            assert s.count("interventions") == 0  # copy mode proposes nothing
        finally:
            s.close()
    assert len(codes) == 1  # copy mode: the harness never moves (the copy took the same code)
    assert coordinator.reported_member(pop).member == 0
    assert coordinator.test_accuracy(pop) is not None and coordinator.total_rollouts(pop) >= 2 * STEPS * TASKS * GROUP


def _pending_moves(pop: Path, n: int) -> list[int]:
    """`n` pending moves of member 1, each a gated-looking intervention of its run (no training)."""
    ps = PopulationStore.open(pop)
    ids = []
    s = Store.open(pop / "m1", create=False)
    try:
        hv = s.run()["harness_version"]
        code = s.harness_version(hv)["code"]
        for k in range(n):
            new = code.replace('"level": 1', f'"level": {k + 2}')
            c = Candidate(title=f"CURRICULUM.level: 1 -> {k + 2}", code=new, parent_version=hv, parent_code=code,
                          proposer="offline", params={"knob": "CURRICULUM.level"})
            iid = iv.record(s, None, c)
            iv.transition(s, iid, "backtesting", "gate")
            iv.transition(s, iid, "passed", "gate passed")
            [eid] = ps.plan_events([Planned(EVERY, "move", 1, 0, Evidence(-0.3, -0.5, -0.1, 32, (0, 1)))])
            ps.set_move(eid, MoveChange(hv, "CURRICULUM.level", "1", str(k + 2), c.diff(), "why", "dead_groups", iid))
            ps.set_event(eid, "pending")
            ids.append(eid)
    finally:
        s.close()
        ps.close()
    return ids


def test_the_operator_approves_and_vetoes_supervised_moves(tmp_path, model_and_harness):  # noqa: F811
    pop = tmp_path / "pop"
    make_population(pop, model_and_harness, "explore", auto_promote=False)
    ok, no = _pending_moves(pop, 2)
    assert "approved" in approve(pop, ok) and "vetoed" in veto(pop, no)
    with pytest.raises(UsageError, match="only a pending move"):
        approve(pop, no)
    with pytest.raises(UsageError, match="no move"):
        veto(pop, 99)
    ps = PopulationStore.open(pop)
    try:
        pop_row = ps.population()
        coordinator.finish_events(ps, pop, [], pop_row)  # the next segment boundary applies the approval
        applied, vetoed = ps.event(ok), ps.event(no)
    finally:
        ps.close()
    assert applied.status == "applied" and vetoed.status == "vetoed"
    s = Store.open(pop / "m1", readonly=True)
    try:
        assert s.run()["harness_version"] == applied.harness_version
        assert '"level": 2' in s.harness_version(applied.harness_version)["code"]
        assert s.intervention(vetoed.intervention_id).status == "vetoed"
        assert s.intervention(applied.intervention_id).status == "promoted"
    finally:
        s.close()


@pytest.mark.parametrize("args, says", [
    (["--population", "1"], "at least 2 members"),
    (["--population", "2", "--set", "population.every=0"], "population.every must be at least 1"),
    (["--population", "2", "--set", "population.mode='both'"], "population.mode must be explore or copy"),
    (["--population", "2", "--jobs", "0"], "--jobs expects at least 1"),
])
def test_bad_population_input_is_one_line_and_exit_2(tmp_path, args, says):
    proc = evotui("run", "--headless", "--steps", "2", "--run-dir", str(tmp_path / "pop"), *args)
    out, err = communicate(proc)
    assert proc.returncode == 2 and says in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "pop").exists()
