"""A population of two real members at tiny sizes: the member clearly behind copies the other
(adapter, optimizer state and harness, byte for byte), takes a gated move in explore mode and
never moves its harness in copy mode; a stop in a copy or in a segment resumes to the end with
every record stored once.

Member 0 trains a model that answers "1" (a quarter of gcd problems: tests/population_models.py);
member 1 starts the same but trains with a learning rate of 1, which scrambles its policy in
one step: at the first comparison it is clearly behind, every time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.config import load_config
from backend.population import adopt, coordinator
from backend.population.store import PopulationStore
from backend.store import Store

from population_models import EVERY, GROUP, SETS, STEPS, TASKS, make_population, model_and_harness  # noqa: F401
from soak_checks import _evals_and_rounds, _harness_versions, _steps_and_rollouts

def store(run: Path) -> Store:
    return Store.open(run, readonly=True)


class Killed(BaseException):
    """The coordinator dies here (as under SIGKILL: no handler runs, nothing is cleaned up)."""


@pytest.fixture(scope="module")
def explore_pop(tmp_path_factory, model_and_harness):  # noqa: F811  (the imported fixture)
    """Explore mode, killed halfway through copying a checkpoint, then resumed to the end."""
    pop = tmp_path_factory.mktemp("explore") / "pop"
    make_population(pop, model_and_harness, "explore")
    real = shutil.copytree

    def copy_then_die(src, dst, *a, **k):
        real(src, dst, *a, **k)
        raise Killed  # the folder is whole under its temporary name, never renamed

    adopt.shutil.copytree = copy_then_die
    try:
        with pytest.raises(Killed):
            coordinator.drive(pop, jobs=2, quiet=True)
    finally:
        adopt.shutil.copytree = real
    ps = PopulationStore.open(pop, readonly=True)
    at_kill = ps.events()
    ps.close()
    left = sorted(p.name for p in (pop / "m1" / "checkpoints" / "copies").iterdir())
    out = coordinator.resume(pop, None, jobs=2, quiet=True)
    return pop, out, at_kill, left


def test_a_member_behind_copies_the_other_byte_for_byte(explore_pop):
    pop, out, at_kill, left = explore_pop
    assert out["status"] == "finished" and out["step"] == STEPS
    assert [(e.kind, e.status) for e in at_kill] == [("copy", "planned"), ("move", "planned")]
    assert len(left) == 1 and left[0].startswith(".tmp-e1-")  # killed mid-copy: no valid name yet
    ps = PopulationStore.open(pop, readonly=True)
    scores, events = ps.scores(EVERY), ps.events()
    ps.close()
    assert [s.best for s in scores] == [True, False] and scores[0].acc > 0
    behind = scores[1]
    assert behind.behind and behind.high < 0 and behind.n == 32
    copy = events[0]
    assert (copy.kind, copy.member, copy.parent, copy.status) == ("copy", 1, 0, "applied")
    assert copy.evidence.high == behind.high and copy.evidence.n == 32 and copy.evidence.compared == (0, 1)
    assert copy.outcome in ("won", "lost", "tied") and copy.outcome_step == STEPS and copy.outcome_n == 32

    m0, m1 = store(pop / "m0"), store(pop / "m1")
    try:
        src = m0.policy_version_at(EVERY)
        pv = m1.get("policy_versions", copy.policy_version)
        assert pv["step"] == EVERY and Path(pv["checkpoint"]).name == f"e{copy.id}"
        for f in ("adapter_model.safetensors", "trainer_state.pt"):
            assert (Path(pv["checkpoint"]) / f).read_bytes() == (Path(src["checkpoint"]) / f).read_bytes()
        copied = m1.harness_version(copy.harness_version)
        assert copied["code"] == m0.harness_version(1)["code"]
        assert copied["note"].startswith(f"population copy e{copy.id}")
        assert len([v for v in m1.live_versions() if (v["note"] or "").startswith("population copy")]) == 1
        # member 1 trained on from the copy: its next checkpoint's parent is the copied one
        after = m1.policy_version_at(EVERY + 1)
        assert after["parent"] == copy.policy_version
        assert {r["policy_version"] for r in m1.rows("SELECT policy_version FROM rollouts WHERE step = ?",
                                                      (EVERY + 1,))} == {copy.policy_version}
        assert not [p for p in (pop / "m1" / "checkpoints" / "copies").iterdir() if p.name.startswith(".tmp")]
    finally:
        m0.close(), m1.close()


def test_the_move_passed_the_safety_gate_and_is_the_members_harness(explore_pop):
    pop, *_ = explore_pop
    ps = PopulationStore.open(pop, readonly=True)
    move = ps.events()[1]
    ps.close()
    assert move.kind == "move" and move.member == 1 and move.status == "applied", move
    assert move.knob and move.old_value != move.new_value and move.code_diff and move.diagnosis
    m1 = store(pop / "m1")
    try:
        row = m1.intervention(move.intervention_id)
        assert row.status == "promoted" and row.child_version == move.harness_version
        gate = m1.latest_backtest(move.intervention_id)
        assert gate.mode == "population-gate" and gate.verdict == "passed"
        steps = m1.rows("SELECT harness_version FROM steps WHERE step > ?", (EVERY,))
        assert {r["harness_version"] for r in steps} == {move.harness_version}
    finally:
        m1.close()
    assert move.outcome in ("won", "lost", "tied")


def test_every_member_is_stored_once_after_the_kill(explore_pop):
    pop, *_ = explore_pop
    for m in ("m0", "m1"):
        s = store(pop / m)
        try:
            _steps_and_rollouts(s, STEPS, TASKS * GROUP)
            _harness_versions(s, pop / m)
            _evals_and_rounds(s)
        finally:
            s.close()
    ps = PopulationStore.open(pop, readonly=True)
    assert ps.comparison_steps() == [EVERY, STEPS] and len(ps.scores()) == 4
    assert [e.kind for e in ps.events()] == ["copy", "move"]  # nothing decided twice
    ps.close()


def test_a_hostile_move_never_becomes_a_harness(explore_pop, tmp_path):
    """Candidates the static check, the worker sandbox or the adversarial replay refuses fail;
    none becomes the member's harness."""
    from backend.evolve import explore
    from backend.evolve.interventions import Candidate

    from hostile_harnesses import replace

    pop, *_ = explore_pop
    run = tmp_path / "m1"
    shutil.copytree(pop / "m1", run)
    s = Store.open(run, create=False)
    try:
        before = s.run()["harness_version"]
        code = s.harness_version(before)["code"]
        cases = {"static": replace("reward_spread", "def reward_spread(r):\n    import os\n    return 0.0\n", code),
                 "sandbox": replace("reward_spread", "def reward_spread(r):\n    while True:\n        pass\n", code),
                 "adversarial": replace("reward_correct", "def reward_correct(r):\n    return 1.0\n", code)}

        def hostile(ctx, table, metrics, n, exclude, trials):
            return [Candidate(title=f"hostile {k}", code=c, parent_version=before, parent_code=code,
                              proposer="offline", params={"knob": k, "from": 0, "to": 1}) for k, c in cases.items()]

        cfg = load_config(None, [*SETS, "evolve.backtest_timeout_s=5"])
        assert explore.propose_move(s, cfg, STEPS, propose=hostile) is None
        assert s.run()["harness_version"] == before
        tried = {i.title: i for i in s.interventions() if i.title.startswith("hostile")}
        assert sorted(tried) == ["hostile adversarial", "hostile sandbox", "hostile static"]
        assert all(i.status == "failed" for i in tried.values()), {k: i.reason for k, i in tried.items()}
        assert "adversarial" in tried["hostile adversarial"].reason
        assert "sandbox" in tried["hostile sandbox"].reason
    finally:
        s.close()


def test_a_won_move_becomes_a_skill_card_with_its_interval(explore_pop, tmp_path):
    from backend.population import lineage
    from backend.population.store import Outcome

    pop, *_ = explore_pop
    ps = PopulationStore.open(pop, readonly=True)
    move = ps.events()[1]
    ps.close()
    run = tmp_path / "m1"
    shutil.copytree(pop / "m1", run)
    sid = lineage.learn_skill(run, move, Outcome("won", STEPS, 0.2, 0.05, 0.35, 32))
    s = Store.open(run, readonly=True)
    try:
        [card] = [r for r in s.skill_rows() if r["id"] == sid]
        assert move.knob in card["change_json"] and '"ci_low":0.05' in card["evidence_json"]
        assert '"n":32' in card["evidence_json"] and card["helped"] == 1
    finally:
        s.close()
