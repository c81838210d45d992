"""A stuck population explores: two real members at tiny sizes that are both at 0 on validation,
with every group dead (the answer-one model says "1" on lcm problems, and the default math
harness pays only answers in tags, so every rollout of a group earns 0).

No member is ever clearly behind, so nobody copies. In explore mode the last member (a tie: the
higher index, m1) takes one move at each comparison without a copy, and the second move does not
repeat the first, which tied; in copy mode nothing moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.evolve.explore import TriedMove, repeats
from backend.population import coordinator, stuck
from backend.population.store import PopulationStore, Score
from backend.store import Store

from population_models import SETS, model_and_harness  # noqa: F401  (the fixture)

EVERY, STEPS = 2, 6
STUCK_SETS = [*SETS, f"steps={STEPS}", "math.datasets=['lcm']"]


def lcm_harness(path: Path) -> str:
    """The default math harness (correct answers in tags, format) training on lcm problems."""
    from backend.harness.loader import default_harness_path

    code = default_harness_path("math").read_text()
    start = code.index("CURRICULUM = ")
    end = code.index("\n", start)
    path.write_text(code[:start] + 'CURRICULUM = {"datasets": {"lcm": 1.0}, "level": 1}' + code[end:])
    return str(path)


def stuck_population(pop: Path, model: str, mode: str, steps: int = STEPS) -> dict:
    from backend.config import load_config

    harness = lcm_harness(pop.parent / "h.py")
    cfg = load_config(None, [*STUCK_SETS, f"steps={steps}", f"model.name='{model}'", f"harness='{harness}'",
                             "population.size=2", f"population.mode='{mode}'", "evolve.auto_promote=true"])
    return coordinator.start(cfg, pop, jobs=2, quiet=True)


def run_of(pop: Path, m: str) -> Store:
    return Store.open(pop / m, readonly=True)


@pytest.fixture(scope="module")
def explore_stuck(tmp_path_factory, model_and_harness):  # noqa: F811  (the imported fixture)
    pop = tmp_path_factory.mktemp("stuck-explore") / "pop"
    out = stuck_population(pop, model_and_harness[0], "explore")
    ps = PopulationStore.open(pop, readonly=True)
    try:
        return pop, out, ps.scores(), ps.events()
    finally:
        ps.close()


def test_the_last_member_of_a_stuck_population_moves_without_a_copy(explore_stuck):
    pop, out, scores, events = explore_stuck
    assert out["status"] == "finished" and out["copies"] == 0
    assert all(s.acc == 0 and not s.behind for s in scores), scores
    assert [e.kind for e in events] == ["move", "move"] and {e.step for e in events} == {EVERY, 2 * EVERY}
    first = events[0]
    assert (first.member, first.parent, first.status) == (1, 0, "applied"), first
    assert first.evidence.n == 32 and first.evidence.compared == (0, 1)
    s = first.stuck
    assert s is not None and s.share >= s.threshold == 0.9 and (s.first, s.last) == (1, EVERY)
    assert s.groups == 2 * EVERY * 2 and s.low <= s.share <= s.high  # 2 members x 2 steps x 2 tasks
    m1 = run_of(pop, "m1")
    try:
        # no copy: m1 keeps its own policy (each version its own step's), and the move is its harness
        assert not (pop / "m1" / "checkpoints" / "copies").exists()
        assert all(v["step"] is not None for v in m1.rows("SELECT step FROM policy_versions"))
        assert m1.intervention(first.intervention_id).status == "promoted"
        after = m1.rows("SELECT harness_version FROM steps WHERE step BETWEEN ? AND ?", (EVERY + 1, 2 * EVERY))
        assert {r["harness_version"] for r in after} == {first.harness_version} != {1}
    finally:
        m1.close()
    m0 = run_of(pop, "m0")
    try:
        assert {r["harness_version"] for r in m0.rows("SELECT harness_version FROM steps")} == {1}
    finally:
        m0.close()
    from backend.tools.population_view import read_population
    from backend.tools.report_population import event_lines

    assert "stuck: dead groups 8/8 = 1.00" in "\n".join(event_lines(read_population(pop)))


def test_the_report_shows_each_members_dead_groups_by_segment(explore_stuck):
    from backend.tools.population_view import read_population
    from backend.tools.report_population import dead_group_lines

    pop, *_ = explore_stuck
    lines = dead_group_lines(read_population(pop))
    header = next(ln for ln in lines if ln.startswith("| member"))
    assert header.count("steps ") == STEPS // EVERY and "steps 1-2" in header
    rows = {ln.split(" | ")[0]: ln for ln in lines if ln.startswith("| m") and ln != header}
    assert set(rows) == {"| m0", "| m1"}
    # the first segment, before any move: every group of both members dead (2 steps x 2 tasks)
    assert all(r.split(" | ")[1] == "1.00 (4)" for r in rows.values()), rows


def test_a_second_stuck_comparison_does_not_repeat_a_move_that_tied(explore_stuck):
    pop, _, _, events = explore_stuck
    first, second = events
    assert first.outcome == "tied" and first.outcome_step == 2 * EVERY  # both members still at 0
    assert second.member == 1 and second.status == "applied" and second.stuck is not None, second
    assert second.knob and second.knob != first.knob, (first.knob, second.knob)
    tried = stuck.tried_moves(events)
    assert tried[0] == TriedMove(first.knob, first.old_value, first.new_value)


def test_the_population_memory_is_what_keeps_a_member_from_repeating_a_tied_move(explore_stuck, tmp_path):
    """m0 never moved. On its run the proposer's first gated move, unaided, is the one m1 tried and
    tied; a stuck move the coordinator plans for m0 draws another knob."""
    import shutil

    from backend.evolve.explore import propose_move
    from backend.population.members import member_config
    from backend.population.store import Evidence, Planned

    pop, _, _, events = explore_stuck
    tied = (events[0].knob, events[0].old_value, events[0].new_value)
    alone, together = tmp_path / "alone", tmp_path / "together"  # each its own run: a proposal is recorded
    shutil.copytree(pop, alone)
    shutil.copytree(pop, together)
    ps = PopulationStore.open(together)
    try:
        p = ps.population()
        configs = [member_config(p.config(), i, EVERY) for i in range(p.size)]
        s = Store.open(alone / "m0", create=False)
        try:
            again = propose_move(s, configs[0], STEPS)
        finally:
            s.close()
        assert again is not None and (again.knob, again.old_value, again.new_value) == tied
        [eid] = ps.plan_events([Planned(STEPS, "move", 0, 1, Evidence(0.0, 0.0, 0.0, 32, (0, 1)),
                                         stuck=events[0].stuck)])
        coordinator.finish_events(ps, together, configs, p, STEPS)
        moved = ps.event(eid)
    finally:
        ps.close()
    assert moved is not None and moved.status == "applied" and moved.knob, moved
    assert moved.knob != tied[0], moved


def test_the_moves_of_one_stuck_comparison_draw_different_knobs(explore_stuck, tmp_path):
    """Two members move at the same stuck comparison: the second draws a knob other than the
    first's, and the best member (`movers` never returns it) is the one left as it was."""
    import shutil

    from backend.population.members import member_config
    from backend.population.store import Evidence, Planned

    pop, _, scores, events = explore_stuck
    both = tmp_path / "both"
    shutil.copytree(pop, both)
    ps = PopulationStore.open(both)
    try:
        p = ps.population()
        configs = [member_config(p.config(), i, EVERY) for i in range(p.size)]
        ids = ps.plan_events([Planned(STEPS, "move", m, 1 - m, Evidence(0.0, 0.0, 0.0, 32, (0, 1)),
                                      stuck=events[0].stuck) for m in (0, 1)])
        coordinator.finish_events(ps, both, configs, p, STEPS)
        first, second = (ps.event(i) for i in ids)
    finally:
        ps.close()
    assert first is not None and second is not None
    assert first.status == second.status == "applied" and first.knob and second.knob, (first, second)
    assert first.knob != second.knob, (first.knob, second.knob)
    at_end = [s for s in scores if s.step == STEPS]
    assert [s.member for s in stuck.movers(at_end, 0)] == [1] and stuck.movers(at_end, 5) == stuck.movers(at_end, 0)


def test_copy_mode_never_moves_a_stuck_population(tmp_path, model_and_harness):  # noqa: F811
    pop = tmp_path / "pop"
    out = stuck_population(pop, model_and_harness[0], "copy", steps=2 * EVERY)  # one decision: at step 2
    ps = PopulationStore.open(pop, readonly=True)
    try:
        assert out["status"] == "finished" and ps.events() == []
        assert all(s.acc == 0 and not s.behind for s in ps.scores())
    finally:
        ps.close()
    for m in ("m0", "m1"):
        s = run_of(pop, m)
        try:
            assert s.run()["harness_version"] == 1
            assert max(r["dead_group_frac"] for r in s.rows("SELECT dead_group_frac FROM steps")) == 1.0
        finally:
            s.close()


def test_a_tried_move_is_not_drawn_again_the_same_way_nor_undone():
    t = [TriedMove("CURRICULUM.level", "1", "0"), TriedMove("SAMPLING.hint", "0.0", "0.2"),
         TriedMove("PROMPT.system", "a", "b")]
    assert repeats(t, "CURRICULUM.level", "2", "1") and repeats(t, "CURRICULUM.level", "0", "1")
    assert not repeats(t, "CURRICULUM.level", "1", "2")
    assert repeats(t, "SAMPLING.hint", "0.2", "0.4") and not repeats(t, "SAMPLING.resample_dead", "0", "1")
    assert repeats(t, "PROMPT.system", "c", "b") and not repeats(t, "PROMPT.system", "b", "c")


def test_the_last_member_is_the_fewest_correct_and_ties_go_to_the_highest_index():
    def sc(member: int, correct: int) -> Score:
        return Score(step=2, member=member, n=10, correct=correct, acc=correct / 10, best=False, diff=0.0,
                     low=0.0, high=0.0, behind=False)

    assert stuck.movers([sc(0, 3), sc(1, 1), sc(2, 2)], 1)[0].member == 1
    assert stuck.movers([sc(0, 0), sc(1, 0), sc(2, 0)], 1)[0].member == 2


def test_stuck_is_the_pooled_dead_share_of_the_members_steps_at_the_threshold(explore_stuck):
    from backend.population.store import Stuck

    pop, *_ = explore_stuck
    got = stuck.dead_share([pop / "m0", pop / "m1"], 1, EVERY, 0.9)
    assert (got.dead, got.groups, got.share, got.first, got.last) == (8, 8, 1.0, 1, EVERY) and stuck.is_stuck(got)
    assert stuck.dead_share([pop / "m0"], 1, 1, 0.9).groups == 2  # one member, one step: its 2 groups
    assert not stuck.is_stuck(Stuck(7, 8, 0.875, 0.53, 0.98, 1, 2, 0.9))
    assert stuck.is_stuck(Stuck(9, 10, 0.9, 0.6, 0.98, 1, 2, 0.9))
    assert not stuck.is_stuck(Stuck(0, 0, 0.0, 0.0, 1.0, 1, 2, 0.9))  # no steps stored: no evidence


def test_a_group_only_a_hint_revived_counts_as_dead_and_a_resampled_one_as_alive():
    row = {"n_groups": 64, "dead_group_frac": 0.5,
           "metrics_json": '{"dead_groups": {"revived_by_hint": 20, "revived_by_resample": 3}}'}
    assert stuck.dead_groups_of(row) == (52, 64)
    assert stuck.dead_groups_of({"n_groups": 8, "dead_group_frac": 1.0, "metrics_json": None}) == (8, 8)
    assert stuck.dead_groups_of(dict(row, metrics_json='{"dead_groups": {"revived_by_hint": 99}}')) == (64, 64)
    # where the step says which hinted groups were dead and are mixed now, only those count back
    both = '{"dead_groups": {"revived_by_hint": 20, "dead_revived_by_hint": 5}}'
    assert stuck.dead_groups_of(dict(row, metrics_json=both)) == (37, 64)


def test_the_movers_are_every_member_but_the_best_last_on_validation_first():
    def sc(member: int, correct: int, best: bool = False) -> Score:
        return Score(step=2, member=member, n=10, correct=correct, acc=correct / 10, best=best, diff=0.0,
                     low=0.0, high=0.0, behind=False)

    tied = [sc(0, 0, best=True), sc(1, 0), sc(2, 0)]
    assert [s.member for s in stuck.movers(tied, 0)] == [2, 1]
    assert [s.member for s in stuck.movers(tied, 1)] == [2]
    assert [s.member for s in stuck.movers([sc(0, 1), sc(1, 3, best=True), sc(2, 2)], 0)] == [0, 2]


def test_the_population_counts_the_rollouts_its_members_drew_not_only_those_stored(explore_stuck, tmp_path):
    """A step that resampled or hinted drew more rollouts than it stored for training (its
    `n_rollouts`); the population's total charges what was drawn, as `evotui compare` does."""
    import shutil
    import sqlite3

    pop, *_ = explore_stuck
    copy = tmp_path / "drew-more"
    shutil.copytree(pop, copy)
    before = coordinator.total_rollouts(copy)
    db = sqlite3.connect(copy / "m1" / "run.db")
    try:
        db.execute("UPDATE steps SET n_rollouts = n_rollouts + 16 WHERE step = 3")
        db.commit()
    finally:
        db.close()
    # at least the 16 drawn again (the replays' rollout equivalent moves with the rollouts a step)
    assert coordinator.total_rollouts(copy) >= before + 16


def test_every_member_draws_what_a_run_without_moves_draws(explore_stuck):
    """Equal rollouts: a member whose move redraws dead groups (a hint, resampling) keeps them
    within its steps' budget (`train.revival_budget`), so each member drew steps x tasks x group."""
    from population_models import GROUP, TASKS

    pop, _, _, events = explore_stuck
    redrew = 0
    for m in ("m0", "m1"):
        s = run_of(pop, m)
        try:
            rows = s.rows("SELECT n_rollouts, metrics_json FROM steps ORDER BY step")
        finally:
            s.close()
        drawn = [r["n_rollouts"] for r in rows]
        assert len(drawn) == STEPS and all(n <= TASKS * GROUP for n in drawn), (m, drawn, [e.knob for e in events])
        for r in rows:
            moved = json.loads(r["metrics_json"]).get("dead_groups", {})
            redrew += bool(moved.get("hinted_groups") or moved.get("resample_rounds"))
    assert redrew, [e.knob for e in events]  # a hint or resampling redrew groups (the second move: a hint)


def _with_validation(run_dir: Path, step: int, correct: bool) -> None:
    """Rewrite the member's validation evaluation at `step`: every problem right or every one wrong."""
    s = Store.open(run_dir)
    try:
        row = s.rows("SELECT id, results_json FROM evals WHERE split = 'validation' AND step = ?", (step,))[0]
        res = [dict(r, correct=correct) for r in json.loads(row["results_json"])]
        with s.tx():
            s.update("evals", row["id"], {"results_json": json.dumps(res), "accuracy": float(correct)})
    finally:
        s.close()


@pytest.mark.parametrize("unless_rising, moves", [(True, 0), (False, 1)])
def test_a_stuck_population_whose_best_member_still_rises_draws_no_move(explore_stuck, tmp_path, unless_rising,
                                                                      moves):
    """Dead groups with validation rising since the last evaluation: still learning, no move
    (`population.stuck_unless_rising`); without the rule the last member moves as before."""
    import shutil

    from backend.config import config_from_dict
    from backend.population import scores as sc
    from backend.population.members import member_config

    src, *_ = explore_stuck
    pop_dir = tmp_path / "pop"
    shutil.copytree(src, pop_dir)
    step = 2 * EVERY
    ps = PopulationStore.open(pop_dir)
    try:
        pop = ps.population()
        before = len([e for e in ps.events(step=step) if e.kind == "move"])
        scores = ps.scores(step)
        best = next(s for s in scores if s.best)
        _with_validation(pop_dir / f"m{best.member}", step - EVERY, correct=False)
        _with_validation(pop_dir / f"m{best.member}", step, correct=True)
        rise = sc.rise_since_last(pop_dir / f"m{best.member}", step)
        assert rise is not None and rise.ci_low > 0 and stuck.still_learning(rise)
        assert sc.rise_since_last(pop_dir / f"m{best.member}", 0) is None  # nothing before the start
        data = pop.config()
        data.setdefault("population", {})["stuck_unless_rising"] = unless_rising
        configs = [member_config(data, i, pop.every) for i in range(pop.size)]
        assert config_from_dict(data).population.stuck_unless_rising is unless_rising
        note = coordinator._decide_stuck(ps, pop_dir, configs, pop, scores, step)
        assert len([e for e in ps.events(step=step) if e.kind == "move"]) - before == moves
        assert ("still learning, no move" in note) is unless_rising and (not note or "+1.000" in note)
    finally:
        ps.close()
