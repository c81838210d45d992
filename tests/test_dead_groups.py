"""The engine's moves on dead groups (backend/dead_groups.py): the harness settings are
validated, a hint prefix is never trained on and never reaches an evaluation, every
resampled rollout is counted, and a harness that names none of them trains exactly as
before they existed.

Real engine runs at tiny sizes in process: the tiny random Llama of tests/tiny_llama.py,
which never answers right, so every group is all wrong (and, under the default reward,
dead)."""

from __future__ import annotations

import json
import math

import pytest

from backend import dead_groups
from backend.envs.base import Task
from backend.harness.check import HarnessError
from backend.harness.loader import default_harness_path
from backend.harness.spec import validate
from dead_group_runs import engine, fingerprint, train

pytestmark = pytest.mark.slow  # a real (tiny) model trained in process

DEFAULT_STEPS_SHA = "653116b555374300"
"""The fingerprint (dead_group_runs.fingerprint) of two default-settings steps of the tiny run under
the spread harness. A change here means a default-settings step changed: rollouts or losses of
every existing harness. Regenerate only for an intended change: `python tests/dead_group_runs.py OUT`."""


def _constants(**sampling) -> dict:
    return {"constants": {"DOMAIN": "math", "PROMPT": {}, "ADVANTAGE": {"rule": "group_std"}, "FILTERS": {},
                          "SAMPLING": sampling, "REWARD_WEIGHTS": {"correct": 1.0}, "CURRICULUM": {}},
            "rewards": ["correct"], "diagnostics": []}


def _with(path, sampling: str, tmp_path, name="h.py") -> str:
    code = path.read_text() if hasattr(path, "read_text") else open(path).read()
    old = 'SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128}'
    assert old in code
    out = tmp_path / name
    out.write_text(code.replace(old, "SAMPLING = " + sampling))
    return str(out)


@pytest.mark.parametrize("key,bad", [("hint", 0.95), ("hint", -0.1), ("hint", "0.5"), ("hint", True),
                                     ("hint", math.nan), ("resample_dead", 5), ("resample_dead", -1),
                                     ("resample_dead", 1.0), ("resample_dead", True)])
def test_spec_rejects_bad_sampling_moves(key, bad):
    with pytest.raises(HarnessError, match=f"SAMPLING {key} must be"):
        validate(_constants(**{key: bad}))


@pytest.mark.parametrize("bad", [1.0, -0.01, "0.5", False, math.inf])
def test_spec_rejects_bad_target_pass_rate(bad):
    raw = _constants()
    raw["constants"]["CURRICULUM"] = {"target_pass_rate": bad}
    with pytest.raises(HarnessError, match=r"CURRICULUM target_pass_rate must be a number in \[0.0, 1.0\)"):
        validate(raw)


def test_spec_keeps_the_moves_only_where_named():
    assert set(validate(_constants()).sampling) == {"temperature", "top_p", "max_new_tokens"}
    spec = validate(_constants(hint=0.9, resample_dead=4))
    assert spec.sampling["hint"] == 0.9 and spec.sampling["resample_dead"] == 4
    raw = _constants()
    raw["constants"]["CURRICULUM"] = {"target_pass_rate": 0}
    assert validate(raw).curriculum == {"target_pass_rate": 0.0}


def test_hint_prefix_and_prefixed_generation():
    from backend.types import Generation

    assert dead_groups.hint_prefix([7, 8, 9, 10], 0.5, 128) == [7, 8]
    assert dead_groups.hint_prefix([7, 8, 9, 10], 0.2, 128) == []
    seen = []

    def generate(prompts, mnt, t, p):
        seen.append((prompts, mnt))
        return [Generation([5] * 2, "xy", "stop") for _ in prompts]
    gen = dead_groups.prefixed(generate, {(1, 2): [3, 4, 4]}, lambda ids: "P" * len(ids))
    out = gen([[1, 2], [9]], 10, 1.0, 1.0)
    assert [g.ids for g in out] == [[3, 4, 4, 5, 5], [5, 5]] and out[0].text == "PPPxy"
    assert sorted(seen) == [([[1, 2, 3, 4, 4]], 7), ([[9]], 10)]  # the prefix spends the budget


def test_hint_prefix_is_masked_and_never_reaches_evaluations(tmp_path, tiny_model, spread_harness, monkeypatch):
    harness = _with(spread_harness, '{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128, "hint": 0.9}',
                    tmp_path)
    eng = engine(tmp_path / "run", tiny_model, harness, ["train.revival_budget='extra'"])
    calls = []
    real = dead_groups.prefixed
    monkeypatch.setattr(dead_groups, "prefixed", lambda *a: calls.append(a[1]) or real(*a))
    eng.evaluate(0)
    assert calls == []  # held-out evaluations never hint
    trained = []
    step = eng.trainer.step
    monkeypatch.setattr(eng.trainer, "step", lambda samples, denom=None: trained.append(samples) or
                        step(samples, denom))
    row = train(eng, [1])[0]
    moves = json.loads(row["metrics_json"])["dead_groups"]
    # every group all wrong: both drawn again with a hint, which replaces them; all 8 counted
    assert moves["hinted_groups"] == [0, 1] and row["n_rollouts"] == 8 and moves["drawn"] == 8
    refs = dead_groups.references(eng.env, eng.harness.spec.prompt, eng.lm.tokenizer)
    stored = eng.store.rows("SELECT group_idx, task_json, token_ids_json FROM rollouts WHERE step = 1")
    assert len(stored) == 4 and len(calls) == 1
    for r in stored:
        k = moves["hint_tokens"][str(r["group_idx"])]
        ref = refs(Task.from_dict(json.loads(r["task_json"])))
        assert k == 3 and json.loads(r["token_ids_json"])[:k] == ref[:k]  # half the 6-token budget
    samples = [s for batch in trained for s in batch]
    assert samples  # the spread reward never ties: the hinted groups train
    for s in samples:  # the prefix masked, the model's own tokens trained
        assert tuple(s.prompt_ids) in calls[0]
        assert s.mask[:3] == [0, 0, 0] and all(s.mask[3:])
    eng.evaluate(1)
    assert len(calls) == 1


def test_resampling_counts_every_draw(tmp_path, tiny_model):
    harness = _with(default_harness_path("math"), '{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128, '
                                                  '"resample_dead": 2}', tmp_path)
    eng = engine(tmp_path / "run", tiny_model, harness, ["train.revival_budget='extra'"])
    row = train(eng, [1])[0]
    moves = json.loads(row["metrics_json"])["dead_groups"]
    # 2 tasks x 2 rollouts, all wrong and dead under the default reward: both groups drawn twice more
    assert moves["resample_rounds"] == 2 and moves["resampled_groups"] == 4 and moves["drawn"] == 12
    assert row["n_rollouts"] == 12 and eng.store.train_rollout_count() == 12
    assert eng.store.count("rollouts") == 4  # the groups trained on are stored, one draw each


def test_within_the_budget_a_step_never_draws_more_than_a_step_without_the_moves(tmp_path, tiny_model):
    """The default `train.revival_budget = "within"`: the first step keeps nothing back (nothing
    to go by) and draws a full step; the next keeps back what the last step wanted redrawn (at
    most half), draws fewer fresh tasks, and stops redrawing when the reserve is spent."""
    harness = _with(default_harness_path("math"), '{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128, '
                                                  '"resample_dead": 2, "hint": 0.9}', tmp_path)
    eng = engine(tmp_path / "run", tiny_model, harness, ["train.tasks_per_step=4"])
    first, second = (json.loads(r["metrics_json"])["dead_groups"] | {"row": r} for r in train(eng, [1, 2]))
    # step 1: 4 fresh groups, all dead and all wrong; no reserve, so no redraw
    assert first["reserved"] == 0 and first["row"]["n_groups"] == 4 and first["wanted"] == 4
    assert first["resample_rounds"] == 0 and first["hinted_groups"] == [] and first["drawn"] == 4 * 2
    # step 2: half kept back; one resampling round of the 2 fresh dead groups spends it, no hint left
    assert second["reserved"] == 2 and second["row"]["n_groups"] == 2 and second["resample_rounds"] == 1
    assert second["hinted_groups"] == [] and second["drawn"] == second["row"]["n_rollouts"] == 4 * 2
    assert eng.store.train_rollout_count() == 2 * 4 * 2  # what two steps without the moves draw
    assert dead_groups.reserve(None, 4) == 0 and dead_groups.reserve(first["row"], 4) == 2
    # a run whose last step wanted fewer keeps fewer back
    assert dead_groups.reserve({"n_groups": 4, "dead_group_frac": 1.0,
                                "metrics_json": '{"dead_groups": {"wanted": 1}}'}, 8) == 1


def test_a_hint_with_nothing_to_give_keeps_nothing_back(tmp_path, tiny_model, monkeypatch):
    """With a hint alone, `wanted` counts the all-wrong groups that have a hint to give: where
    the env has no reference (multi-turn SWE), no step keeps tasks back for a redraw it cannot make."""
    harness = _with(default_harness_path("math"), '{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128, '
                                                  '"hint": 0.9}', tmp_path)
    eng = engine(tmp_path / "run", tiny_model, harness, ["train.tasks_per_step=4"])
    monkeypatch.setattr(dead_groups, "references", lambda *a: (lambda task: None))
    for row in train(eng, [1, 2]):
        moves = json.loads(row["metrics_json"])["dead_groups"]
        assert moves["wanted"] == 0 and moves["reserved"] == 0 and row["n_groups"] == 4, moves


def test_default_settings_train_as_before(tmp_path, tiny_model, spread_harness):
    base = engine(tmp_path / "a", tiny_model, spread_harness)
    train(base, [1, 2])
    assert fingerprint(base)["sha"] == DEFAULT_STEPS_SHA
    explicit = _with(spread_harness, '{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128, "hint": 0.0, '
                                     '"resample_dead": 0}', tmp_path)
    code = open(explicit).read().replace('"level": 1}', '"level": 1, "target_pass_rate": 0.0}')
    assert "target_pass_rate" in code
    open(explicit, "w").write(code)
    twin = engine(tmp_path / "b", tiny_model, explicit)
    train(twin, [1, 2])
    assert fingerprint(twin) == fingerprint(base)


def test_references_are_right_answers():
    """What a hint shows the start of is an answer the evaluator calls right (code: the family's
    reference solution; swe: the level's fix edit; math: in test_curriculum_rule)."""
    import random

    from backend.config import CodeConfig, SweConfig
    from backend.envs.code import CodeEnv
    from backend.envs.swe import SweEnv

    code = CodeEnv(CodeConfig(timeout_s=5))
    tasks = code.sample_tasks(2, random.Random(3), {"level": 1})
    assert all(v.correct for v in code.evaluate_many([(t, code.reference_solution(t)) for t in tasks]))
    swe = SweEnv(SweConfig(levels="0,1", test_timeout_s=10))
    shots = swe.sample_tasks(2, random.Random(3), {"level": 1})
    assert all(swe._judge_shots([t], [swe.reference_solution(t)])[0][0].correct for t in shots)
