"""The typed search space over the harness: every knob reachable, ranges respected,
moves single-factor, steps that adapt to stored outcomes, and rounds that never run dry."""

import math
import random
from types import SimpleNamespace

import pytest

from backend.config import RunConfig, to_dict
from backend.evolve import interventions as iv
from backend.evolve import offline, run_round, schedule, space
from backend.evolve.interventions import Evidence
from backend.evolve.edit import changed_names, constant
from backend.harness import spec
from backend.harness.check import HarnessError
from backend.harness.loader import check_source, default_harness_path, sha
from backend.store import Store
from synthetic_run import add_steps, build_run, context, make_probe

HARNESSES = {name: (default_harness_path("math").parent / f"{name}.py").read_text()
             for name in ("math", "math_expert", "code", "swe")}
DOMAIN = {"math": "math", "math_expert": "math", "code": "code", "swe": "swe"}
CAP = 512


def _validate(code: str):
    """The harness schema's verdict on `code`'s literal constants (what the worker would send)."""
    consts = {n: constant(code, n) for n in spec.REQUIRED + ("VALIDITY",) if constant(code, n) is not None}
    return spec.validate({"constants": consts, "rewards": sorted(space.reward_names(code)), "diagnostics": []})


def _all_knobs():
    return [(name, k) for name, code in HARNESSES.items() if name != "math_expert"  # the same knobs as math
            for k in space.knobs(code, DOMAIN[name], CAP)]


def test_the_space_covers_every_setting_a_harness_exposes():
    names = {k.name for k in space.knobs(HARNESSES["math"], "math", CAP)}
    assert names == {
        "SAMPLING.temperature", "SAMPLING.top_p", "SAMPLING.max_new_tokens", "REWARD_WEIGHTS.correct",
        "REWARD_WEIGHTS.format", "ADVANTAGE.rule", "ADVANTAGE.std", "ADVANTAGE.eps",
        "FILTERS.drop_truncated", "FILTERS.drop_invalid", "CURRICULUM.level", "CURRICULUM.datasets.basic_arithmetic",
        "CURRICULUM.datasets.chain_sum", "PROMPT.system", "SAMPLING.hint", "SAMPLING.resample_dead",
        "CURRICULUM.target_pass_rate"}
    # the run's budget is not in the space
    assert not any(k.name.split(".")[-1] in ("kl_coef", "group_size", "tasks_per_step") for _, k in _all_knobs())
    # a lone reward term has no weight knob: rescaling it changes no group-relative advantage
    assert "REWARD_WEIGHTS.correct" not in {k.name for k in space.knobs(HARNESSES["math_expert"], "math", CAP)}
    assert {k.name for k in space.knobs(HARNESSES["code"], "code", CAP)} >= {"REWARD_WEIGHTS.passed",
                                                                            "CURRICULUM.level"}


@pytest.mark.parametrize("name, knob", _all_knobs(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_knob_is_reachable_by_a_single_factor_move_the_schema_accepts(name, knob):
    code = HARNESSES[name]
    moves = list(space.moves(code, knob, space.Steps.of(knob, [])))
    assert moves, f"{knob.name} has no move from {knob.value(code)!r}"
    assert len({m.new for m in moves}) == len(moves)
    for move in moves[:2]:  # one each way (the rest differ only in step size)
        new = move.apply(code)
        assert changed_names(code, new) == [knob.constant]
        assert knob.value(new) == move.new != knob.value(code)
        want = node = constant(code, knob.constant)  # one knob changed, the constant's other keys kept
        for key in knob.path[:-1]:
            node = node.setdefault(key, {})
        node[knob.path[-1]] = move.new
        assert constant(new, knob.constant) == want
        check_source(new)
        _validate(new)


def test_search_ranges_lie_inside_the_schema_and_moves_stay_in_them():
    code = HARNESSES["math"]
    for knob in space.knobs(code, "math", CAP):
        if knob.type not in ("float", "int"):
            continue
        for edge in (knob.lo, knob.hi):  # both ends of the search range are valid harnesses
            _validate(space.Move(knob, knob.value(code), knob.clip(edge)).apply(code))
        rng = random.Random(knob.name)
        for _ in range(30):  # whatever the step grew or shrank to, a move stays in range
            steps = space.Steps(size=rng.uniform(knob.min_step, 3 * (knob.hi - knob.lo + 1)), way=rng.choice([-1, 1]))
            start = knob.clip(rng.uniform(knob.lo, knob.hi))
            for v in space.values(knob, start, steps):
                assert knob.lo <= v <= knob.hi and (knob.type != "int" or isinstance(v, int))
    with pytest.raises(ValueError, match="leaves the harness schema"):
        space._narrow(spec.TOP_P, 0.5, 1.5)
    cap_knob = next(k for k in space.knobs(code, "math", 200) if k.name == "SAMPLING.max_new_tokens")
    assert cap_knob.hi == 200  # the run's cap bounds the knob, it is not a knob itself
    with pytest.raises(HarnessError):  # the schema still refuses what the space would never propose
        _validate(code.replace('"top_p": 1.0', '"top_p": 1.5'))


def test_steps_follow_the_one_fifth_rule_and_turn_after_a_failure():
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "SAMPLING.temperature")
    up = {"from": 1.0, "to": 1.2}
    grown = space.Steps.of(knob, [dict(up, status="passed")])
    assert grown.size == pytest.approx(2 * knob.step) and grown.way == 1 and (grown.tried, grown.good) == (1, 1)
    failed = space.Steps.of(knob, [dict(up, status="failed")])
    assert failed.size == pytest.approx(knob.step * 2 ** -0.25) and failed.way == -1
    assert space.values(knob, 1.0, failed)[0] < 1.0  # the next move goes the other way
    one_in_five = space.Steps.of(knob, [dict(up, status=s) for s in ("passed", "failed", "inconclusive",
                                                                     "failed", "vetoed")])
    assert one_in_five.size == pytest.approx(knob.step)  # stable at a one-in-five success rate
    pending = space.Steps.of(knob, [dict(up, status="backtesting")])
    assert pending.tried == 0 and pending.size == knob.step
    tiny = space.Steps.of(knob, [dict(up, status="failed")] * 40)
    assert tiny.size == pytest.approx(knob.min_step)


def test_stored_outcomes_set_the_next_step(tmp_path):
    store = Store.open(tmp_path / "run.db")  # no rollouts needed: the proposer reads only the interventions
    store.create_run("t", to_dict(RunConfig()), 0, 1)
    store.add_harness_version(HARNESSES["math"], None, "", "active", sha(HARNESSES["math"]))
    ctx = SimpleNamespace(store=store, cfg=RunConfig(), harness=SimpleNamespace(code=HARNESSES["math"], domain="math"),
                          auto_promote=lambda: False, policy=None)
    knob = next(k for k in space.knobs(ctx.harness.code, "math", CAP) if k.name == "SAMPLING.temperature")
    first = next(space.moves(ctx.harness.code, knob, space.Steps.of(knob, [])))
    c = iv.Candidate(title=first.title(), code=first.apply(ctx.harness.code), parent_version=1,
                     parent_code=ctx.harness.code, proposer="offline", params=first.params())
    iid = iv.record(store, None, c)
    iv.transition(store, iid, "backtesting", "test")
    iv.transition(store, iid, "failed", "probe: no gain")
    opts = {key: opt for _, key, opt in offline.options(ctx, [], {}, schedule.judgeable_by_trial(ctx))}
    _, steps = opts["space:SAMPLING.temperature"]
    assert steps.tried == 1 and steps.size == pytest.approx(knob.step * 2 ** -0.25)
    assert steps.way == -first.direction
    store.close()


def test_log_scale_knobs_step_by_factors_and_leave_zero():
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "REWARD_WEIGHTS.format")
    vals = space.values(knob, 0.1, space.Steps.of(knob, []))
    assert vals[:3] == [0.0, pytest.approx(0.2), pytest.approx(0.05)]  # a secondary term: off first
    main = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "REWARD_WEIGHTS.correct")
    assert 0.0 not in space.values(main, 1.0, space.Steps.of(main, []))  # the verdict's term never
    assert space.values(knob, 0.0, space.Steps(size=math.log(2), way=1))[0] == knob.floor


def test_rounds_from_the_expert_harness_never_come_back_empty(tmp_path):
    """Several real rounds (replay, probes, gate) in a row: each proposes candidates, and the
    later rounds explore knobs the earlier ones did not."""
    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    cfg = RunConfig()
    cfg.evolve.window = 3
    knobs_by_round = []
    for r in range(3):
        step = 3 * (r + 1)
        if r:
            add_steps(store, step - 2, step, seed=r)
        out = run_round(context(store, step=step, cfg=cfg, probe=make_probe(seed=r))).summary
        assert out["error"] is None
        fresh = [store.get("interventions", i) for i in out["proposed"]]
        assert len([x for x in fresh if x["code"]]) >= 3, f"round {r} proposed {fresh}"
        for row in fresh:
            if row["code"]:
                assert len(iv.params(row)["names"]) == 1  # single-factor, by the existing check
        knobs_by_round.append({iv.params(x).get("knob") for x in fresh} - {None})
    assert knobs_by_round[1] - knobs_by_round[0] and knobs_by_round[2] - knobs_by_round[1]
    store.close()


def test_curriculum_knobs_follow_the_runs_datasets():
    """A run on datasets the harness's mix does not name gets no weight knobs for them, and no
    level knob when none of its datasets has levels (both would change nothing but cost trials)."""
    from backend.evolve import space
    from backend.harness.loader import default_harness_path

    code = default_harness_path("math").read_text()
    names = lambda ds: {k.name for k in space.knobs(code, "math", 256, ds)}  # noqa: E731
    default = names(["basic_arithmetic", "chain_sum"])
    assert {"CURRICULUM.level", "CURRICULUM.datasets.basic_arithmetic", "CURRICULUM.datasets.chain_sum"} <= default
    levelled = names(["gcd", "decimal_chain_sum"])  # datasets with levels, not in the harness's mix
    assert {n for n in levelled if n.startswith("CURRICULUM.")} == {"CURRICULUM.level", "CURRICULUM.target_pass_rate"}
    other = names(["spell_backward", "word_sorting"])  # datasets without levels
    assert not {n for n in other if n.startswith("CURRICULUM.")}
    assert default - other == {"CURRICULUM.level", "CURRICULUM.datasets.basic_arithmetic",
                               "CURRICULUM.datasets.chain_sum", "CURRICULUM.target_pass_rate"}
    assert names(None) == default  # unknown datasets: the harness's own mix


@pytest.mark.parametrize("name", ["math", "code"])
def test_a_knob_says_it_needs_a_trial_exactly_when_the_backtest_would_ask_for_one(name):
    """`Knob.needs_trial` (what the proposer reads) and `backtest.needs_trial` (what the gate
    does) are one rule: checked on the first move of every knob of the shipped harnesses."""
    from backend.evolve.backtest import needs_trial
    from backend.harness.loader import Harness

    code = HARNESSES[name]
    base = Harness.from_code(code)
    for knob in space.knobs(code, DOMAIN[name], CAP):
        move = next(space.moves(code, knob, space.Steps.of(knob, [])))
        asked = needs_trial(Harness.from_code(move.apply(code)), base) is not None
        assert knob.needs_trial == asked, knob.name


class _TrialsOn:
    trials = True


@pytest.mark.parametrize("auto, policy, offered", [
    (True, None, False),         # auto-promote, no trials: nobody could ever promote such a change
    (True, _TrialsOn(), True),   # auto-promote with trials: a trial judges it
    (False, None, True),         # supervised: an inconclusive change waits for the operator
])
def test_changes_that_need_a_trial_are_proposed_only_where_something_can_judge_them(tmp_path, auto, policy, offered):
    store = Store.open(tmp_path / "run.db")
    store.create_run("t", to_dict(RunConfig()), 0, 1)
    store.add_harness_version(HARNESSES["math"], None, "", "active", sha(HARNESSES["math"]))
    ctx = SimpleNamespace(store=store, cfg=RunConfig(), harness=SimpleNamespace(code=HARNESSES["math"], domain="math"),
                          auto_promote=lambda: auto, policy=policy)
    opts = offline.options(ctx, [], {}, schedule.judgeable_by_trial(ctx))
    knobs = {key[len(space.PREFIX):] for _, key, _ in opts if key.startswith(space.PREFIX)}
    trial_knobs = {"SAMPLING.temperature", "SAMPLING.top_p", "SAMPLING.max_new_tokens", "CURRICULUM.level",
                   "CURRICULUM.datasets.basic_arithmetic", "CURRICULUM.datasets.chain_sum",
                   "ADVANTAGE.rule", "ADVANTAGE.std", "ADVANTAGE.eps"}
    assert (trial_knobs <= knobs) if offered else not (trial_knobs & knobs)
    assert {"PROMPT.system", "FILTERS.drop_truncated"} <= knobs  # the knobs replay or a probe judges are always there
    store.close()


def _forty_rounds(store, cfg, policy=None) -> tuple[list[int], list]:
    """Forty rounds (a 200-step run at the gpu profile) in which every candidate ends
    inconclusive; the candidates' count per round, and the candidates."""
    from backend.evolve.records import Observation

    per_round, cands_all = [], []
    for r in range(40):
        ctx = context(store, step=5 * (r + 1), cfg=cfg)
        ctx.policy = policy
        rid = store.add_round(ctx.step, ctx.harness_version, [], {})
        rules = schedule.Rules(ctx)
        cands = rules.screen(schedule.propose_all(ctx, Observation(ctx.step, range(1, 4), [], {}, rid), rules))
        per_round.append(len(cands))
        for c in cands:
            iid = schedule.record(ctx, rid, c).id
            iv.transition(store, iid, "backtesting", "test")
            iv.transition(store, iid, "inconclusive", "test: no effect either way")
        cands_all += cands
    return per_round, cands_all


def test_a_long_run_of_rounds_that_settle_nothing_never_runs_dry(tmp_path):
    """A long run does not run dry of moves once the step-sized ones are tried: once a
    knob's step-sized moves are all tried, its untried values nearest the current one come next,
    so every round of a supervised run fills its slots, and no candidate is tried twice."""
    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    cfg = RunConfig()
    cfg.evolve.window = 3
    per_round, cands = _forty_rounds(store, cfg)
    assert min(per_round) >= cfg.evolve.candidates, per_round
    codes = [iv.normalise(r.code) for r in store.interventions() if r.code]
    assert len(codes) == len(set(codes))  # no candidate tried twice
    assert len({c.params.get("knob") for c in cands} - {None}) >= 5


def test_an_auto_run_without_trials_looks_again_and_says_when_its_space_is_spent(tmp_path):
    """The gpu profile: auto-promote, no trials. From the expert harness (one reward term: no
    weights to move; sampling, curriculum and the advantage rule need a trial) the moves the gate
    can judge are few: the system prompt, the filters, the diagnostics. Later looks fill what the
    proposer leaves empty: each old inconclusive candidate once, after LATER_LOOK_ROUNDS rounds.
    A round left empty says so, and names the knobs it left for a trial: every empty round is one
    with no untried move this run can judge."""
    from backend.evolve.round import run_round
    from backend.tools.report_search import search_facts, search_lines

    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    store.set_run(auto_promote=1)
    cfg = RunConfig()
    cfg.evolve.window = 3
    per_round, cands = _forty_rounds(store, cfg)
    assert per_round[0] >= cfg.evolve.candidates and sum(per_round[schedule.LATER_LOOK_ROUNDS:]) > 0, per_round
    empty = [r for r, n in enumerate(per_round) if n == 0]
    assert empty, per_round  # the expert's judgeable space is small: some rounds find nothing
    ctx = context(store, step=205, cfg=cfg)
    assert not offline.propose(ctx, [], {}, 4, iv.known_codes(store) | {ctx.harness.code},
                            schedule.judgeable_by_trial(ctx))  # nothing untried
    rnd = run_round(ctx).summary
    assert rnd["error"] is None and rnd["proposed"] == [] and "SAMPLING.temperature" in rnd["spent"]
    assert {"ADVANTAGE.rule", "CURRICULUM.level"} <= set(rnd["spent"])
    text = store.round(rnd["round_id"])["summary"]
    assert "no untried move this run can judge; left for a trial (evolve.trials off): " in text, text
    md = "\n".join(search_lines({"coevolve": [{"seed": 0, "search": search_facts(store)}]}))
    # (the forty rounds above are bare rows: only the real round records whether its space was spent)
    assert f"| coevolve s0 | 41 | {len(empty) + 1} | 1 | 0 |" in md
    assert "spent (left for a trial: SAMPLING.temperature" in md
    looks = [c.look_of for c in cands if c.look_of]
    assert looks and len(looks) == len(set(looks))  # each looked at again once at most
    rounds_of = {r.id: r.round_id for r in store.interventions()}
    assert min(sorted(rounds_of.values()).index(rounds_of[i]) for i in looks) == 0  # the oldest come first
    assert not {c.params.get("knob") for c in cands} & {"SAMPLING.temperature", "CURRICULUM.level"}


class TrialStandIn:
    """A policy whose trials find no difference (both arms the same verdicts); records each one."""

    trials = True

    def __init__(self) -> None:
        self.trialled: list = []

    def generate(self, harness, n_tasks):
        return make_probe()(harness, n_tasks)

    def trial(self, candidate):
        from backend.types import TrialArm

        self.trialled.append(candidate.sha)
        arm = TrialArm(candidate.sha, [f"v{k}" for k in range(40)], [k % 3 == 0 for k in range(40)], 320, 0.1)
        return arm, arm


TRIAL_KNOBS = {"SAMPLING.temperature", "SAMPLING.top_p", "SAMPLING.max_new_tokens", "CURRICULUM.level",
               "CURRICULUM.datasets.basic_arithmetic", "CURRICULUM.datasets.chain_sum", "ADVANTAGE.rule",
               "ADVANTAGE.std", "ADVANTAGE.eps", "SAMPLING.hint", "SAMPLING.resample_dead",
               "CURRICULUM.target_pass_rate"}


def test_under_trials_spent_a_round_with_nothing_else_to_try_trials_one_move(tmp_path):
    """`evolve.trials = "spent"`: from the expert harness, auto-promoting, the rounds
    that would have been spent (see the test above: some are) each offer one move that needs a
    trial instead, marked for the backtest; a round with judgeable moves left never offers one."""
    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    store.set_run(auto_promote=1)
    cfg = RunConfig()
    cfg.evolve.window = 3
    cfg.evolve.trials = "spent"
    per_round, cands = _forty_rounds(store, cfg, policy=TrialStandIn())
    assert min(per_round) >= 1, per_round  # no empty round while moves that need a trial are left
    spent = [c for c in cands if c.evidence is Evidence.TRIAL]
    assert spent and {c.params.get("knob") for c in spent} <= TRIAL_KNOBS
    assert not {c.params.get("knob") for c in cands if c.evidence is not Evidence.TRIAL} & TRIAL_KNOBS
    k = 0
    for n in per_round:  # a round that offers a trial offers nothing else (evolve.max_trials = 1)
        mine = cands[k:k + n]
        assert len(mine) == 1 or not any(c.evidence is Evidence.TRIAL for c in mine)
        k += n


def test_under_trials_spent_only_a_spent_rounds_candidate_is_trialled(tmp_path):
    """The backtest trials a candidate that needs a trial only when a spent round proposed it;
    any other (an operator's, a supervised round's) stays inconclusive and says why."""
    from backend.evolve.backtest import backtest

    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    cfg = RunConfig()
    cfg.evolve.trials = "spent"
    policy = TrialStandIn()
    ctx = context(store, step=3, cfg=cfg)
    ctx.policy = policy
    code = HARNESSES["math_expert"].replace('"temperature": 1.0', '"temperature": 0.8')
    assert code != HARNESSES["math_expert"]
    results = {}
    for marked in (True, False):
        c = iv.Candidate(title=f"temperature 0.8 ({marked})", code=code + f"\n# {marked}\n",
                         parent_version=ctx.harness_version, parent_code=ctx.harness.code, proposer="offline",
                         evidence=Evidence.TRIAL if marked else None)
        (results[marked],) = backtest(ctx, [schedule.record(ctx, None, c).id])
    assert len(policy.trialled) == 1
    assert results[True].status == "inconclusive" and results[True].reason.startswith("trial (4 steps")
    assert results[False].status == "inconclusive"
    assert "trials run only in spent rounds here" in results[False].reason


def test_a_later_look_is_reapplied_onto_the_active_harness(tmp_path):
    from backend.harness.loader import sha

    store = build_run(tmp_path / "run.db", steps=3, harness_code=HARNESSES["math_expert"])
    cfg = RunConfig()
    v1 = store.run()["harness_version"]
    ctx = context(store, step=5, cfg=cfg)
    knob = next(k for k in space.knobs(ctx.harness.code, "math") if k.name == "ADVANTAGE.rule")
    move = next(space.moves(ctx.harness.code, knob, space.Steps.of(knob, [])))
    rid = store.add_round(5, v1, [], {})
    iid = iv.record(store, rid, iv.Candidate(title=move.title(), code=move.apply(ctx.harness.code), parent_version=v1,
                                             parent_code=ctx.harness.code, proposer="offline", params=move.params()))
    iv.transition(store, iid, "backtesting", "test")
    iv.transition(store, iid, "inconclusive", "test")
    for k in range(schedule.LATER_LOOK_ROUNDS - 1):
        store.add_round(10 + 5 * k, v1, [], {})
    assert schedule.later_looks(context(store, step=60, cfg=cfg), 4) == []  # not yet
    store.add_round(60, v1, [], {})
    v2_code = ctx.harness.code.replace('"drop_truncated": False', '"drop_truncated": True')
    assert v2_code != ctx.harness.code
    v2 = store.add_harness_version(v2_code, v1, "", "active", sha(v2_code))
    store.set_run(harness_version=v2)
    [look] = schedule.later_looks(context(store, step=65, cfg=cfg), 4)
    assert look.parent_version == v2 and look.look_of == iid
    assert look.code == move.apply(v2_code)  # the one change, on today's harness


def test_a_numeric_knobs_grid_covers_its_range_nearest_first():
    code = HARNESSES["math"]
    knobs = {k.name: k for k in space.knobs(code, "math", CAP)}
    temp = knobs["SAMPLING.temperature"]
    near = space.grid(temp, 0.8)
    assert near[:3] == [0.8, 0.85, 0.75] and min(near) == temp.lo and max(near) == temp.hi
    assert len(near) == len(set(near)) == 29  # 0.1 to 1.5 by 0.05
    weight = knobs["REWARD_WEIGHTS.format"]  # a log scale: factors of 1.1 from the value, never below the floor
    assert space.grid(weight, 0.1)[:3] == [0.1, 0.11, 0.09091] and min(space.grid(weight, 0.1)) >= weight.floor
    tokens = knobs["SAMPLING.max_new_tokens"]
    assert all(isinstance(v, int) and tokens.lo <= v <= tokens.hi for v in space.grid(tokens, 128))
    floor = space.Steps(size=temp.min_step, way=1)  # the step at its floor: six step-sized values, then the grid
    vals = space.values(temp, 1.0, floor)
    assert vals[:6] == [1.05, 0.95, 1.025, 0.975, 1.1, 0.9] and vals[6:8] == [1.15, 0.85]
    assert len(vals) == len(set(vals)) == 30 and 1.0 not in vals


def test_values_past_a_failed_move_the_same_way_count_as_tried():
    """A knob's effect is taken to have one peak: once a move from a value failed, values at least as
    far the same way from that value are not proposed (before, the grid walked the failing direction
    one finest step a round: REWARD_WEIGHTS.format 0 -> 0.05, 0.055, 0.0605, ..., all
    failed). Nearer values, the other way, and moves from another value stay open."""
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "SAMPLING.temperature")
    steps = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "failed"}])
    assert steps.failed == ((1.0, 1.2),)
    vals = space.values(knob, 1.0, steps)
    assert vals and not [v for v in vals if v >= 1.2]
    assert 1.1 in vals and 1.15 in vals and min(vals) == knob.lo  # nearer up, and all the way down
    assert max(space.values(knob, 0.8, steps)) == knob.hi  # from another value the range is open
    inconclusive = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "inconclusive"}])
    assert max(space.values(knob, 1.0, inconclusive)) == knob.hi  # only a failure rules values out
    weight = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "REWARD_WEIGHTS.format")
    up = space.Steps.of(weight, [{"from": 0.0, "to": weight.floor, "status": "failed"}])
    assert space.values(weight, 0.0, up) == []  # from 0 a weight can only go up: spent


def test_the_weight_of_the_only_paying_term_is_not_a_knob_where_the_advantage_takes_the_scale_out():
    """Once every other reward weight is 0, moving the last one only rescales every reward:
    group_std and rank advantages are unchanged (each such move replays at signal
    +0.000 [0, 0] and takes a slot). Under group_mean it scales the update."""
    from backend.evolve.edit import set_constant

    code = HARNESSES["math"]
    weights = constant(code, "REWARD_WEIGHTS")
    names = {k.name for k in space.knobs(code, "math", CAP)}
    assert {"REWARD_WEIGHTS.correct", "REWARD_WEIGHTS.format"} <= names  # two terms that pay: both knobs
    format_off = set_constant(code, "REWARD_WEIGHTS", dict(weights, format=0))
    names = {k.name for k in space.knobs(format_off, "math", CAP)}
    assert "REWARD_WEIGHTS.correct" not in names and "REWARD_WEIGHTS.format" in names  # format may come back
    mean = set_constant(format_off, "ADVANTAGE", dict(constant(code, "ADVANTAGE"), rule="group_mean"))
    assert "REWARD_WEIGHTS.correct" in {k.name for k in space.knobs(mean, "math", CAP)}


def test_an_inert_filter_changes_no_training_row_so_it_is_no_knob():
    """FILTERS.drop_dead_groups is left out of the space (`space.INERT_FILTERS`) because it cannot
    change an update: over random batches, with every other filter and rule, the rollouts trained
    on and their advantages are the same with it on and off."""
    from backend.harness.loader import load_default
    from backend.harness.semantics import RolloutOut, filter_and_advantage

    base = load_default("math").spec
    rng = random.Random(0)
    for trial in range(300):
        n_groups, size = rng.randint(1, 5), rng.randint(2, 5)
        keys = [(g,) for g in range(n_groups) for _ in range(size)]
        rewards = [rng.choice([0.0, 0.1, 1.0, 1.1]) for _ in keys]
        finishes = [rng.choice(["stop", "stop", "length"]) for _ in keys]
        labels = [[("answer_copied_from_prompt", "")] if rng.random() < 0.2 else [] for _ in keys]
        others = {"drop_truncated": rng.random() < 0.5, "drop_invalid": rng.random() < 0.5}
        rule = dict(base.advantage, rule=rng.choice(["group_std", "group_mean", "rank"]))
        trained = []
        for inert in (False, True):
            spec_ = base.__class__(**{**base.__dict__, "advantage": rule,
                                      "filters": dict(others, drop_dead_groups=inert)})
            outs = [RolloutOut(r, {}, {}, list(lb)) for r, lb in zip(rewards, labels)]
            filter_and_advantage(keys, outs, finishes, spec_)
            trained.append([(i, o.advantage) for i, o in enumerate(outs) if o.trained])
        assert trained[0] == trained[1], (trial, rewards, others, rule)
    assert all(k not in {kn.name for kn in space.knobs(HARNESSES["math"], "math", CAP)}
               for k in (f"FILTERS.{f}" for f in space.INERT_FILTERS))


def _walk(knob, start: float, same_update: int) -> list[float]:
    """The values a proposer tries for `knob` from `start` when every move ends inconclusive, with
    `same_update` on each (1: its replay left training's update as it was), until none is left."""
    history: list[dict] = []
    while True:
        tried = {h["to"] for h in history}
        left = [v for v in space.values(knob, start, space.Steps.of(knob, history)) if v not in tried]
        if not left or len(history) > 500:
            return [h["to"] for h in history]
        history.append({"from": start, "to": left[0], "status": "inconclusive", "same_update": same_update})


def test_a_move_that_changed_no_update_grows_the_step_and_rules_out_nearer_values():
    """A move whose replay left training's update as it was (a threshold short of every rollout, a
    weight that group_std rescales away) was too small, or the knob does nothing here at any size:
    the next move goes farther the same way, and values no farther than it are not proposed."""
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "SAMPLING.temperature")
    same = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "inconclusive", "same_update": 1}])
    assert same.unchanged == ((1.0, 1.2),) and same.size == pytest.approx(knob.step * 2) and same.way == 1
    vals = space.values(knob, 1.0, same)
    assert not [v for v in vals if 1.0 < v <= 1.2] and max(vals) == knob.hi and min(vals) == knob.lo
    assert vals[0] > 1.2  # farther the same way first
    changed = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "inconclusive", "same_update": 0}])
    assert changed.unchanged == () and changed.size < knob.step and 1.1 in space.values(knob, 1.0, changed)
    passed = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "passed", "same_update": 1}])
    assert passed.unchanged == ()  # a pass is a pass
    harmed = space.Steps.of(knob, [{"from": 1.0, "to": 1.2, "status": "failed", "same_update": 1}])
    assert harmed.unchanged == () and harmed.failed == ((1.0, 1.2),)  # a failure saw harm (the guard)


@pytest.mark.parametrize("mode, lo, hi, nothing", [
    ("replay", 0.0, 0.0, True), ("replay", -0.0004, 0.0009, True), ("replay", -0.002, 0.0, False),
    ("replay", None, None, False), ("probe", 0.0, 0.0, False)])
def test_a_replay_whose_interval_hugs_zero_changed_nothing_the_gate_can_see(mode, lo, hi, nothing):
    """The common case on the GPU: a weight moved too little to turn any rollout's advantage
    against its verdict changes every advantage a little (so not `same_update`) and `signal` not
    at all: its interval lies within NO_EFFECT of 0. The next move goes farther. A probe's
    interval is sampling noise, never such evidence."""
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == "REWARD_WEIGHTS.correct")
    move = {"from": 1.0, "to": 1.278, "status": "inconclusive", "mode": mode, "ci_low": lo, "ci_high": hi,
            "same_update": 0}
    assert space.changed_nothing("inconclusive", move) is nothing and not space.changed_nothing("failed", move)
    steps = space.Steps.of(knob, [move])
    assert (steps.unchanged == ((1.0, 1.278),)) is nothing
    assert (steps.size > knob.step) is nothing


@pytest.mark.parametrize("name", ["REWARD_WEIGHTS.correct", "REWARD_WEIGHTS.format", "SAMPLING.temperature"])
def test_a_knob_that_never_changes_the_update_is_spent_in_a_few_moves(name):
    """Where every move of a knob leaves the update as it was, the walk ends after a handful of
    moves; before, it tried its whole grid at the finest step (the correct weight dozens of
    times, every one at +0.000). Where the moves did change the update but
    settled nothing, the grid is still walked: only a replay that saw no change rules values out."""
    knob = next(k for k in space.knobs(HARNESSES["math"], "math", CAP) if k.name == name)
    start = knob.value(HARNESSES["math"])
    inert, settled_nothing = _walk(knob, start, 1), _walk(knob, start, 0)
    assert len(inert) <= 12, inert
    assert len(settled_nothing) >= 3 * len(inert), (len(settled_nothing), len(inert))
    assert min(inert + [start]) == min(settled_nothing + [start])  # both ends of the range are still reached
    assert max(inert + [start]) == max(settled_nothing + [start])
