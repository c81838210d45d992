"""The search memory: a move or family that was inconclusive (or changed nothing) is held until
validation accuracy moves beyond its interval, the memory is read from the store alone (a
reopened run sees the same), and the report counts what each knob and family cost and returned.

Real SQLite (the synthetic run's real migrations and rows); backtests are stored through the
store's own `add_backtest`, with the verdicts and intervals a judge would write."""

from dataclasses import asdict

import pytest

from backend.config import RunConfig
from backend.evolve import interventions as iv
from backend.evolve import run_round, schedule, search_memory, space
from backend.evolve.budget import search_budget
from backend.evolve.records import Observation, Skip
from backend.harness.loader import sha
from backend.store import Store
from backend.tools.report_search import search_facts, search_lines
from synthetic_run import add_eval, build_run, context, make_probe, outcomes

N_VAL = 64
PROMPT = "space:PROMPT.system"


@pytest.fixture
def store(tmp_path):
    s = build_run(tmp_path / "run.db", steps=6)
    yield s
    s.close()


def _moves(ctx, name: str) -> list[space.Move]:
    knob = next(k for k in space.knobs(ctx.harness.code, "math") if k.name == name)
    return list(space.moves(ctx.harness.code, knob, space.Steps.of(knob, [])))


def _cand(ctx, move: space.Move) -> iv.Candidate:
    """A candidate of one search-space move on the active harness, as the offline proposer makes it."""
    return iv.Candidate(title=move.title(), code=move.apply(ctx.harness.code), parent_version=ctx.harness_version,
                        parent_code=ctx.harness.code, proposer="offline", kind=move.knob.kind, params=move.params())


def _judged(ctx, rid, c: iv.Candidate, verdict: str, mode: str = "probe", n: int = 8,
            ci: tuple[float, float] = (-0.1, 0.15)) -> int:
    """Record `c` in round `rid` and store the backtest a judge would: its verdict and interval."""
    iid = schedule.record(ctx, rid, c).id
    iv.transition(ctx.store, iid, "backtesting", "backtest started")
    ctx.store.add_backtest(iid, mode=mode, n_rollouts=n, metrics={}, verdict=verdict, reason="test", ms=1.0,
                           stats={"metric": "accuracy", "effect": sum(ci) / 2, "ci_low": ci[0], "ci_high": ci[1],
                                  "p_value": 0.5, "n": n, "underpowered": 0}, score=0.0)
    iv.transition(ctx.store, iid, verdict, "test")
    return iid


def _round(store, step: int) -> int:
    return store.add_round(step, store.run()["harness_version"], [], {})


def _prompt_draws(ctx) -> tuple[list[iv.Candidate], schedule.Rules]:
    """What a round would try now (the offline proposer under the round's rules)."""
    rules = schedule.Rules(ctx)
    seen = Observation(ctx.step, range(1, 6), [{"label": "no_answer_tag", "count": 40, "share": 0.9, "trend": 0.0}],
                       {}, _round(ctx.store, ctx.step))
    return rules.screen(schedule.propose_all(ctx, seen, rules)), rules


def test_a_prompt_family_inconclusive_twice_waits_until_validation_moves_beyond_its_interval(store):
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    a, b, c = _moves(ctx, "PROMPT.system")
    _judged(ctx, _round(store, 5), _cand(ctx, a), "inconclusive")
    rules = schedule.Rules(ctx)
    assert rules.reason(_cand(ctx, b)) is None  # one inconclusive choice holds that choice, not the family

    _judged(context(store, step=10), _round(store, 10), _cand(ctx, b), "inconclusive")
    why = schedule.Rules(context(store, step=15)).reason(_cand(ctx, c))
    assert why is not None and why.startswith("search memory: PROMPT.system's last 2 tries returned inconclusive")
    assert isinstance(why, iv.Refusal) and why.whole_option  # the proposer stops drawing the knob
    assert "validation then 0.125 [0.065, 0.228], n 64, step 0" in why
    drawn, rules = _prompt_draws(context(store, step=15))
    assert not [d for d in drawn if d.params.get("knob") == "PROMPT.system"]
    assert [s for s in rules.skipped if s.key == PROMPT and s.reason.startswith("search memory:")]

    add_eval(store, 10, outcomes(N_VAL, 10))  # 0.156: inside the interval (paired: -0.022 to +0.093)
    assert schedule.Rules(context(store, step=15)).reason(_cand(ctx, c)) is not None
    add_eval(store, 20, outcomes(N_VAL, 20))  # 0.312: beyond it (paired: +0.092 to +0.288)
    assert schedule.Rules(context(store, step=25)).reason(_cand(ctx, c)) is None
    drawn, rules = _prompt_draws(context(store, step=25))
    assert [d for d in drawn if d.params.get("knob") == "PROMPT.system"]
    assert not [s for s in rules.skipped if s.reason.startswith("search memory:")]


def test_a_move_that_changed_nothing_is_held_on_a_new_harness_version_too(store):
    """The move (knob, from, to) is held, not only its code: after another change is promoted
    the same move has other code, and the memory still knows it."""
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    move = next(m for m in _moves(ctx, "REWARD_WEIGHTS.format"))
    _judged(ctx, _round(store, 5), _cand(ctx, move), "inconclusive", mode="replay", n=64, ci=(0.0, 0.0))
    [t] = search_memory.load(store).tries
    assert t.outcome is search_memory.Outcome.NOTHING and t.cost.replay_rows == 64 and t.cost.rollouts == 0
    v1 = ctx.harness_version
    v2_code = ctx.harness.code.replace('"drop_truncated": False', '"drop_truncated": True')
    assert v2_code != ctx.harness.code
    store.set_run(harness_version=store.add_harness_version(v2_code, v1, "", "active", sha(v2_code)))
    ctx2 = context(store, step=10)
    again = _cand(ctx2, next(m for m in _moves(ctx2, "REWARD_WEIGHTS.format") if m.new == move.new))
    why = schedule.Rules(ctx2).reason(again)
    assert why is not None and why.startswith(f"search memory: '{move.title()}' returned changed nothing")
    assert not why.whole_option  # the knob's other values may still go
    other = _cand(ctx2, next(m for m in _moves(ctx2, "REWARD_WEIGHTS.format") if m.new != move.new))
    assert schedule.Rules(ctx2).reason(other) is None


def test_a_try_left_for_want_of_a_trial_holds_nothing(store):
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    a, b, c = _moves(ctx, "PROMPT.system")
    for m in (a, b):
        _judged(ctx, _round(store, 5), _cand(ctx, m), "inconclusive", n=0)  # read and generated nothing
    assert schedule.Rules(ctx).reason(_cand(ctx, c)) is None


def test_the_memory_survives_a_reopen(store, tmp_path):
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    a, b, c = _moves(ctx, "PROMPT.system")
    for step, m in ((5, a), (10, b)):
        _judged(context(store, step=step), _round(store, step), _cand(ctx, m), "inconclusive")
    before = search_memory.load(store)
    why = schedule.Rules(context(store, step=15)).reason(_cand(ctx, c))
    path = store.path
    store.close()
    again = Store.open(path)
    try:
        assert search_memory.load(again) == before and before.family_holds
        assert schedule.Rules(context(again, step=15)).reason(_cand(context(again, step=15), c)) == why
    finally:
        again.close()


def test_a_later_look_waits_until_the_policy_changed(store):
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    iid = _judged(ctx, _round(store, 5), _cand(ctx, _moves(ctx, "PROMPT.system")[0]), "inconclusive")
    for k in range(schedule.LATER_LOOK_ROUNDS):
        _round(store, 10 + 5 * k)
    assert schedule.later_looks(context(store, step=60), 4) == []  # ten rounds, the same policy
    add_eval(store, 60, outcomes(N_VAL, 20))
    [look] = schedule.later_looks(context(store, step=65), 4)
    assert look.look_of == iid


def _fixture(store) -> dict[str, int]:
    """Two rounds of known cost and outcome; returns {name: intervention id}."""
    add_eval(store, 0, outcomes(N_VAL, 8))
    ctx = context(store, step=5)
    r1, r2 = _round(store, 5), _round(store, 10)
    a, b, _ = _moves(ctx, "PROMPT.system")
    ids = {"a": _judged(ctx, r1, _cand(ctx, a), "inconclusive", n=8),
           "b": _judged(ctx, r1, _cand(ctx, b), "inconclusive", n=6),  # the round's incumbent arm: 8, shared
           "w": _judged(ctx, r1, _cand(ctx, _moves(ctx, "REWARD_WEIGHTS.format")[0]), "inconclusive",
                        mode="replay", n=64, ci=(-0.0004, 0.0002)),
           "f": _judged(ctx, r2, _cand(ctx, _moves(ctx, "FILTERS.drop_truncated")[0]), "passed", mode="replay",
                        n=64, ci=(0.05, 0.2)),
           "t": _judged(ctx, r2, _cand(ctx, _moves(ctx, "SAMPLING.temperature")[0]), "failed", mode="trial", n=40,
                        ci=(-0.3, -0.1))}
    iv.transition(store, ids["f"], "promoted", "test")
    broken = iv.Candidate(title="broken", code="def (", parent_version=ctx.harness_version,
                          parent_code=ctx.harness.code, proposer="llm")
    schedule.record(ctx, r2, broken)  # a failed proposal: never judged, no try
    skip = Skip("System prompt: choice 3", PROMPT, "offline", "search memory: test")
    store.finish_round(r2, "test", [asdict(skip), asdict(Skip("x", PROMPT, "offline", "cooldown: test"))])
    return ids


def test_the_report_counts_each_family_s_cost_and_return(store):
    _fixture(store)
    facts = search_facts(store)
    rows = {f["family"]: f for f in facts["memory"]}
    assert [search_memory.family_name(f) for f in rows] == ["SAMPLING.temperature", "PROMPT.system",
                                                            "FILTERS.drop_truncated", "REWARD_WEIGHTS.format"]
    assert rows[PROMPT] == {"family": PROMPT, "tries": 2, "replay_rows": 0, "rollouts": 22.0, "passed": 0,
                            "inconclusive": 2, "nothing": 0, "failed": 0, "promoted": 0, "held": 1}
    assert rows["space:SAMPLING.temperature"]["rollouts"] == 80.0  # the trial's candidate and incumbent arms
    b = search_budget(store)
    assert sum(f["rollouts"] for f in rows.values()) == b["candidate_rollouts"] + b["incumbent_rollouts"]
    md = "\n".join(search_lines({"coevolve": [{"seed": 0, "search": facts}]}))
    assert "## Search memory: what each knob and family cost and returned" in md
    assert "| coevolve s0 | SAMPLING.temperature | 1 | 0 | 80 | 0 | 0 | 0 | 1 | 0 | 0 |" in md
    assert "| coevolve s0 | PROMPT.system | 2 | 0 | 22 | 0 | 2 | 0 | 0 | 0 | 1 |" in md
    assert "| coevolve s0 | FILTERS.drop_truncated | 1 | 64 | 0 | 1 | 0 | 0 | 0 | 1 | 0 |" in md
    assert "| coevolve s0 | REWARD_WEIGHTS.format | 1 | 64 | 0 | 0 | 0 | 1 | 0 | 0 | 0 |" in md
    assert "- PROMPT.system's last 2 tries returned inconclusive" in md  # held now, and why


def test_a_real_round_s_costs_add_up_to_the_search_budget(store):
    add_eval(store, 0, outcomes(N_VAL, 8))
    cfg = RunConfig()
    run_round(context(store, cfg=cfg, probe=make_probe(groups=2, group_size=4)))
    memory = search_memory.load(store)
    judged = {b.intervention_id for b in store.backtests()}
    assert memory.tries and {t.id for t in memory.tries} == judged
    b = search_budget(store)
    assert sum(t.cost.rollouts for t in memory.tries) == pytest.approx(b["candidate_rollouts"]
                                                                      + b["incumbent_rollouts"])
    assert sum(t.cost.replay_rows for t in memory.tries) == b["replay_rollouts_scored"]
    assert all(t.step == 6 and t.validation is not None and t.validation.step == 0 for t in memory.tries)
