"""Moves that act on dead groups: the knobs (hint, resampling, a pass-rate target), the diagnosis
behind them, the offline and LLM proposers offering them first in a stuck window, partial credit
for code, and the rule that only training (a trial or the population) judges them."""

import json
import random
from types import SimpleNamespace

import pytest

from backend.config import RunConfig
from backend.evolve import deadgroups as dg
from backend.evolve import offline, schedule, space
from backend.evolve.edit import changed_names, constant
from backend.evolve.interventions import Evidence, kind_of
from backend.evolve.llm import build_messages, candidate_from, parse_answer
from backend.evolve.templates import by_id
from backend.harness import spec
from backend.harness.loader import Harness, check_source, default_harness_path
from synthetic_run import build_run, context

HARNESSES = {name: (default_harness_path("math").parent / f"{name}.py").read_text()
             for name in ("math", "math_expert", "code", "code_expert", "swe")}
DOMAIN = {"math": "math", "math_expert": "math", "code": "code", "code_expert": "code", "swe": "swe"}
NEW = ("SAMPLING.hint", "SAMPLING.resample_dead", "CURRICULUM.target_pass_rate")
RESCUES = {"SAMPLING.hint", "SAMPLING.resample_dead", "SAMPLING.max_new_tokens", "CURRICULUM.level",
           "CURRICULUM.target_pass_rate", "CURRICULUM.datasets.basic_arithmetic", "CURRICULUM.datasets.chain_sum"}


def _table(dead: float, correct_share: float = 0.05, truncated: float = 0.0) -> list:
    rows = [{"label": "dead_groups", "count": int(400 * dead), "validity": 0, "examples": [], "share": dead,
             "trend": 0.0, "correct_share": correct_share}]
    if truncated:
        rows.append({"label": "truncated", "count": int(400 * truncated), "validity": 0, "examples": [],
                     "share": truncated, "trend": 0.0, "correct_share": 0.0})
    return rows


def _metrics(dead: float, accuracy: float = 0.02) -> dict:
    return {"dead_group_frac": dead, "n_groups": 100, "n_rollouts": 400, "accuracy": accuracy}


def _validate(code: str):
    consts = {n: constant(code, n) for n in spec.REQUIRED + ("VALIDITY",) if constant(code, n) is not None}
    return spec.validate({"constants": consts, "rewards": sorted(space.reward_names(code)), "diagnostics": []})


def _settings(code: str) -> SimpleNamespace:
    """What `space.why_trial` compares, read from the literals (as the schema would pass them)."""
    return SimpleNamespace(**{k: constant(code, k.upper()) or {} for k in ("sampling", "curriculum", "advantage")})


@pytest.mark.parametrize("name", ["math", "code", "swe"])
def test_each_new_knob_moves_within_its_range_one_factor_at_a_time(name):
    code = HARNESSES[name]
    knobs = {k.name: k for k in space.knobs(code, DOMAIN[name], 512)}
    assert set(NEW) <= set(knobs)
    for knob in (knobs[n] for n in NEW):
        assert knob.needs_trial and knob.rescues
        lo, hi = {"SAMPLING.hint": spec.HINT, "SAMPLING.resample_dead": spec.RESAMPLE_DEAD,
                  "CURRICULUM.target_pass_rate": spec.TARGET_PASS_RATE}[knob.name]
        assert lo <= knob.lo < knob.hi <= hi and (knob.name != "CURRICULUM.target_pass_rate" or knob.hi < hi)
        rng = random.Random(knob.name)
        for _ in range(20):  # whatever the step and the start, every value stays in the search range
            steps = space.Steps(size=rng.uniform(knob.min_step, 2.0), way=rng.choice([-1, 1]))
            for v in space.values(knob, knob.clip(rng.uniform(knob.lo, knob.hi)), steps):
                assert knob.lo <= v <= knob.hi and (knob.type != "int" or isinstance(v, int))
        moves = list(space.moves(code, knob, space.Steps.of(knob, []), {}, _metrics(0.9)))
        assert moves and all(m.old == 0 for m in moves)
        for move in moves[:3]:
            new = move.apply(code)
            assert changed_names(code, new) == [knob.constant] and knob.value(new) == move.new
            check_source(new)
            _validate(new)  # the engine's schema accepts it
    rate = knobs["CURRICULUM.target_pass_rate"]
    target = next(space.moves(code, rate, space.Steps.of(rate, [])))
    assert target.new == 0.5  # switched on where groups are most mixed


def test_the_diagnosis_reads_the_table_and_metrics_with_its_numbers():
    d = dg.diagnose(_table(0.9, correct_share=0.1, truncated=0.2), _metrics(0.9))
    assert d.stuck and d.dead == 0.9 and d.all_wrong == pytest.approx(0.81) and d.truncated == 0.2
    text = d.text()
    assert "dead groups 0.90 [" in text and "of 100 groups" in text and "all-wrong groups 0.81" in text
    assert not dg.diagnose(_table(0.1), _metrics(0.1)).stuck
    assert dg.diagnose(_table(0.7), {}).dead == 0.7  # no metrics: the table's share
    by = {e["label"]: e for e in _table(0.9)}
    assert dg.hint_way(by, _metrics(0.9)) == 1 and dg.target_way(by, _metrics(0.9)) == 1
    assert dg.resample_way(by, _metrics(0.9, accuracy=0.0)) == 0  # never right: another draw ties again
    mixed = {e["label"]: e for e in _table(0.1)}
    assert dg.hint_way(mixed, _metrics(0.1)) == -1 and dg.tokens_way(mixed, _metrics(0.1)) == 0


@pytest.mark.parametrize("dead, first_rescues", [(0.9, True), (0.1, False)])
def test_the_offline_proposer_puts_dead_group_moves_first_only_when_stuck(tmp_path, dead, first_rescues):
    store = build_run(tmp_path / "run.db", steps=1)
    ctx = context(store)  # supervised: every knob may be offered
    table, metrics = _table(dead, truncated=0.1), _metrics(dead)
    ranked = offline.options(ctx, table, metrics, schedule.judgeable_by_trial(ctx))
    first = ranked[0][1]
    assert (first[len(space.PREFIX):] in RESCUES) is first_rescues, [k for _, k, _ in ranked[:5]]
    cands = offline.propose(ctx, table, metrics, 3, set(), schedule.judgeable_by_trial(ctx))
    knob = cands[0].params.get("knob")
    assert (knob in RESCUES) is first_rescues, [c.title for c in cands]
    if first_rescues:  # the candidate carries the diagnosis that motivated it, with its numbers
        assert "Diagnosis: dead groups 0.90 [" in cands[0].hypothesis
        assert cands[0].params["diagnosis"].startswith("dead groups 0.90")
        tier = [k[len(space.PREFIX):] for _, k, _ in ranked[:7] if k.startswith(space.PREFIX)]
        assert set(tier) == {"CURRICULUM.level", "CURRICULUM.target_pass_rate", "SAMPLING.hint",
                             "SAMPLING.resample_dead", "SAMPLING.max_new_tokens"}  # each with a way to go
        assert {k for _, k, _ in ranked[:7]} - {space.PREFIX + n for n in tier} == {
            "lenient_extraction", "partial_format_credit"}  # the snippets that revive dead groups
    else:
        assert not any("diagnosis" in c.params for c in cands)
    ctx.policy = SimpleNamespace(trials=False)  # a live policy that cannot trial: a probe would only defer them
    ranked = offline.options(ctx, table, metrics, schedule.judgeable_by_trial(ctx))
    assert ranked[0][1][len(space.PREFIX):] not in RESCUES
    ctx.policy = SimpleNamespace(trials=True)
    ranked = offline.options(ctx, table, metrics, schedule.judgeable_by_trial(ctx))
    assert (ranked[0][1][len(space.PREFIX):] in RESCUES) is first_rescues
    store.close()


def test_only_training_judges_the_dead_group_moves():
    """A hint (and every move acting on dead groups) is never judged by replay agreement or a probe:
    its kind needs fresh rollouts, `why_trial` hands it to a trial, and a run that cannot run
    one leaves it out (`Knob.needs_trial`, the same rule)."""
    code = HARNESSES["math"]
    base = _settings(code)
    for knob in space.knobs(code, "math", 512):
        move = next(space.moves(code, knob, space.Steps.of(knob, [])))
        assert (space.why_trial(_settings(move.apply(code)), base) is not None) == knob.needs_trial, knob.name
        if knob.rescues:
            assert knob.needs_trial and kind_of(knob.constant) in ("sampling", "curriculum")
    hint = next(k for k in space.knobs(code, "math", 512) if k.name == "SAMPLING.hint")
    hinted = _settings(next(space.moves(code, hint, space.Steps.of(hint, []))).apply(code))
    assert "judged on validation without hints" in space.why_trial(hinted, base)
    ctx = SimpleNamespace(cfg=RunConfig(), policy=None)
    assert schedule.evidence(ctx, "sampling") is Evidence.PROBE  # never a replay; the probe defers to a trial
    assert space.why_trial(_settings(code.replace('"max_new_tokens": 128', '"max_new_tokens": 128, "hint": 0.0')),
                           base) is None  # a hint of 0 is no hint
    kept, left = offline.split_knobs(space.knobs(code, "math", 512), trials=False)
    assert {"SAMPLING.hint", "SAMPLING.resample_dead", "CURRICULUM.target_pass_rate"} <= {k.name for k in left}
    assert not {k.name for k in kept} & RESCUES


def test_llm_messages_list_the_new_knobs_and_the_diagnosis_and_answers_may_choose_them(tmp_path):
    store = build_run(tmp_path / "run.db", steps=1)
    ctx = context(store)
    messages = build_messages(ctx, _table(0.9), _metrics(0.9), [], 3, trials=True)
    user = messages[-1]["content"]
    space_rows = json.loads(user.split("Search space (knobs of this harness):\n", 1)[1].split("\n\n", 1)[0])
    rows = {r["knob"]: r for r in space_rows}
    assert rows["SAMPLING.hint"]["range"] == [0.0, 0.6] and rows["SAMPLING.resample_dead"]["range"] == [0, 4]
    assert rows["CURRICULUM.target_pass_rate"]["range"] == [0.0, 0.8]
    assert all(rows[n]["acts_on_dead_groups"] and rows[n]["judged_by"] == "training" for n in NEW)
    assert "Dead groups:\ndead groups 0.90 [" in user and "Training is stuck" in user
    assert "SAMPLING.hint" in messages[0]["content"]
    calm = build_messages(ctx, _table(0.1), _metrics(0.1), [], 3, trials=True)[-1]["content"]
    assert "Training is not stuck." in calm
    ok = candidate_from(parse_answer(json.dumps({"hypothesis": "all-wrong groups", "knob": "SAMPLING.hint",
                                                 "value": 0.3}))[0], ctx, [])
    assert ok.error is None and ok.params["knob"] == "SAMPLING.hint" and '"hint": 0.3' in ok.code
    _validate(ok.code)
    far = candidate_from(parse_answer('{"hypothesis": "h", "knob": "SAMPLING.hint", "value": 0.9}')[0], ctx, [])
    assert far.error == "llm: malformed answer: SAMPLING.hint must be a number in [0, 0.6], got 0.9"
    store.close()


def _view(status: str, passed: int = 0, total: int = 4, **facts) -> dict:
    return {"question": "def f(x):", "answer": None, "prompt": "", "completion": "```python\ndef f(x): ...\n```",
            "finish": "stop", "completion_tokens": 20, "max_new_tokens": 256, "domain": "code",
            "obs": {"tests": {"status": status, "passed": passed, "total": total}, "code_block": True,
                    "facts": dict(facts), "examples": [], "code_body": "def f(x): ..."}, "turns": [], "meta": {}}


def test_partial_test_credit_pays_the_share_passed_and_nothing_gameable():
    t = by_id("partial_test_credit")
    assert t is not None and t.rescues and t.domains == ("code",)
    assert t.make(HARNESSES["code_expert"], random.Random(0), {"max_new_tokens_cap": 512}) is None  # has it
    made = t.make(HARNESSES["code"], random.Random(0), {"max_new_tokens_cap": 512})
    assert made is not None
    edit, params = made
    code = edit.apply(HARNESSES["code"])
    assert changed_names(HARNESSES["code"], code) == ["reward_passed"] and params["partial"] in (0.25, 0.4)
    h = Harness.from_code(code)
    passed = lambda view: h.score(view)[1]["passed"]  # noqa: E731
    assert passed(_view("passed", 4)) == 1.0
    assert passed(_view("failed", 3)) == pytest.approx(params["partial"] * 0.75)
    assert passed(_view("failed", 3)) < 0.5  # below any pass, and never "the reward says right"
    assert passed(_view("error", 3)) == 0.0  # tests that did not run (a tampered runner is an error)
    assert passed(_view("failed", 3, returns_constant=True)) == 0.0  # a constant passes the common value
    assert passed(_view("failed", 3, writes_files=True)) == 0.0  # a validity diagnostic flags it
    assert passed(_view("failed", 3, total=0)) == 0.0  # HumanEval: no case count
    rank = t.score({e["label"]: e for e in _table(0.9)}, _metrics(0.9))
    assert rank > t.score({e["label"]: e for e in _table(0.1)}, _metrics(0.1))


def test_an_llm_answer_choosing_a_dead_group_move_travels_over_http_with_its_diagnosis(tmp_path):
    """A real local chat server answers with a hint move: the request listed the knob, the answer
    becomes one move of the space, and the candidate keeps the diagnosis the model was shown."""
    from backend.evolve import llm
    from chat_server import ChatServer, llm_config

    store = build_run(tmp_path / "run.db", steps=1)
    answer = json.dumps({"interventions": [{"title": "Hint all-wrong groups", "target": "dead_groups",
                                            "hypothesis": "no correct rollout to learn from",
                                            "expected": "fewer dead groups", "knob": "SAMPLING.hint", "value": 0.2}]})
    with ChatServer(lambda body: answer) as srv:
        ctx = context(store, cfg=llm_config(srv.url))
        (c,) = llm.propose(ctx, _table(0.9), _metrics(0.9), 3, set(), trials=True)
    (req,) = srv.requests
    assert '"knob": "SAMPLING.hint"' in req["body"]["messages"][-1]["content"]
    assert c.error is None and c.proposer == "llm" and c.params["knob"] == "SAMPLING.hint"
    assert c.params["diagnosis"].startswith("dead groups 0.90 [")
    assert changed_names(c.parent_code, c.code) == ["SAMPLING"]
    store.close()
