"""Generated code tasks: deterministic, split by meaning, and every reference passes its own tests."""

from __future__ import annotations

import random

import pytest

from backend.config import CodeConfig, ConfigError, load_config
from backend.envs import codegen, held_out_sets
from backend.envs.code import CodeEnv
from backend.envs.code_facts import examples_from_prompt

FENCE = "```"


def block(code: str) -> str:
    return f"Here you go:\n{FENCE}python\n{code}\n{FENCE}\n"


@pytest.fixture(scope="module")
def env():
    return CodeEnv(CodeConfig(timeout_s=5))


def test_every_level_has_families_and_generation_is_deterministic():
    for level in codegen.LEVELS:
        assert len(codegen.families(level)) >= 6
    for name in codegen.families():
        a, b = codegen.make(name, 11), codegen.make.__wrapped__(name, 11)  # cached and fresh agree
        assert a == b and a.id == f"gen/{name}/11" and a.n_tests >= codegen.MIN_HIDDEN
        assert codegen.problem(a.id) == a
    # different seeds give different tasks (constants, names, wording)
    prompts = {codegen.make("affine", s).prompt for s in range(20)}
    assert len(prompts) >= 18


def test_prompts_show_two_examples_the_facts_can_read():
    p = codegen.make("slice_case", 4)
    ex = examples_from_prompt(p.prompt, p.entry_point)
    assert len(ex) == 2 and [f"{p.entry_point}({e['args']})" for e in ex] == [c for c, _ in p.visible]
    assert p.prompt.startswith(f"def {p.entry_point}(") and '"""' in p.prompt


def test_held_out_sets_are_frozen_disjoint_and_large(env):
    val, test = env.validation_tasks(10**6), env.test_tasks(10**6)
    assert len(val) >= 200 and len(test) >= 500
    keys = {s: {codegen.problem(t.id).key for t in ts} for s, ts in (("val", val), ("test", test))}
    assert len(keys["val"]) == len(val) and len(keys["test"]) == len(test)  # no meaning twice
    assert not keys["val"] & keys["test"]
    train = env.sample_tasks(300, random.Random(0), {"level": 0})
    assert not {codegen.problem(t.id).key for t in train} & (keys["val"] | keys["test"])
    assert {t.meta["level"] for t in train} == {0} and len({t.meta["family"] for t in train}) >= 8
    sets = held_out_sets(env, 32, 64)  # what the loop evaluates: prefixes, mixed over families
    assert [t.id for t in sets["validation"]] == [t.id for t in val[:32]]
    assert len({t.meta["family"] for t in sets["test"]}) >= 8


def test_humaneval_is_the_out_of_distribution_test_only_when_asked(env):
    assert "ood" not in held_out_sets(env, 4, 4)
    ood = held_out_sets(env, 4, 4, n_ood=500)["ood"]
    assert len(ood) == 164 and {t.meta["source"] for t in ood} == {"humaneval"}
    trained = {t.id for t in env.sample_tasks(300, random.Random(0), {"level": 0})}
    assert not trained & {t.id for t in ood}
    assert [t.id for t in held_out_sets(env, 4, 4, n_ood=3)["ood"]] == [t.id for t in ood[:3]]


def test_curriculum_moves_the_training_level(env):
    for level in (1, 3):
        tasks = env.sample_tasks(12, random.Random(level), {"level": level})
        assert {t.meta["level"] for t in tasks} == {level}
    assert env.sample_tasks(3, random.Random(0), {"level": 9})[0].meta["level"] == 3  # clamped


def test_references_pass_and_wrong_answers_fail_in_the_sandbox(env):
    rng = random.Random(5)
    probs = [codegen.make(name, rng.randrange(10**6)) for name in codegen.families()]
    pairs = [(env.task(p.id), block(p.solution)) for p in probs]
    # a wrong answer: the first visible example's value, whatever the input
    pairs += [(env.task(p.id), block(f"def {p.entry_point}(*args):\n    return {p.visible[0][1]}")) for p in probs]
    verdicts = env.evaluate_many(pairs)
    n = len(probs)
    assert [(p.id, v.status) for p, v in zip(probs, verdicts[:n]) if not v.correct] == []
    assert all(v.detail["passed"] == v.detail["total"] == p.n_tests for p, v in zip(probs, verdicts[:n]))
    wrong = verdicts[n:]
    assert not any(v.correct for v in wrong)
    assert all(v.status == "failed" and v.detail["passed"] < v.detail["total"] for v in wrong)


def test_humaneval_source_and_config():
    he = CodeEnv(CodeConfig(source="humaneval"))
    assert len(he.heldout_tasks()) + len(he._train) == 164
    assert he.ood_tasks(500) == []  # HumanEval trained on: no out-of-distribution test
    assert load_config(None, ["domain=code"]).code.source == "generated"
    with pytest.raises(ConfigError, match="code.source"):
        load_config(None, ["code.source='mbpp'"])
    with pytest.raises(ConfigError, match="heldout_levels"):
        load_config(None, ["code.heldout_levels=[5]"])
