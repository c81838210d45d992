"""Code domain: HumanEval through the sandbox, and the default code harness.
Generated tasks: tests/test_codegen.py; canaries and the expert harness: tests/test_code_canaries.py."""

from __future__ import annotations

import random

import pytest

from backend.config import CodeConfig
from backend.envs.base import Verdict
from backend.envs.code import CodeEnv, load_problems
from backend.envs.code_facts import examples_from_prompt, extract_code
from backend.harness.loader import RolloutView, load_default

FENCE = "```"


@pytest.fixture(scope="module")
def env():
    return CodeEnv(CodeConfig(source="humaneval", timeout_s=3))


@pytest.fixture(scope="module")
def harness():
    return load_default("code")


def block(code: str) -> str:
    return f"Here you go:\n{FENCE}python\n{code}\n{FENCE}\n"


def view(env, task, completion, verdict, finish="stop") -> RolloutView:
    return RolloutView(question=task.question, answer=task.answer, prompt="", completion=completion, finish=finish,
                       completion_tokens=50, max_new_tokens=256, obs=env.observe(task, completion, verdict),
                       turns=(), domain="code", meta=task.meta, task_id=task.id)


def test_split_is_deterministic_and_disjoint(env):
    train = {t.id for t in env._train}
    held = {t.id for t in env.heldout_tasks()}
    assert len(train) + len(held) == 164 and not train & held
    assert 0.15 < len(held) / 164 < 0.35
    assert {t.id for t in CodeEnv(CodeConfig(source="humaneval")).heldout_tasks()} == held
    assert not {t.id for t in env.sample_tasks(50, random.Random(1), {"level": 3})} & held


def test_curriculum_levels(env):
    rng = random.Random(0)
    assert {t.meta["level"] for t in env.sample_tasks(30, rng, {"level": 1})} == {1}
    assert max(t.meta["level"] for t in env.sample_tasks(60, rng, {"level": 2})) <= 2


def test_all_canonical_solutions_pass(env):
    probs = load_problems()
    assert len(probs) == 164
    pairs = [(env.task(k), block(p["prompt"] + p["canonical_solution"])) for k, p in probs.items()]
    verdicts = env.evaluate_many(pairs)
    failed = [(t.id, v.status, v.detail) for (t, _), v in zip(pairs, verdicts) if not v.correct]
    assert not failed, failed[:3]


def test_continuation_style_also_passes(env):
    t = env.task("HumanEval/2")
    assert env.evaluate(t, load_problems()[t.id]["canonical_solution"]).status == "passed"


CASES = {
    "wrong": (block("def has_close_elements(numbers, threshold):\n    return False"), "failed"),
    "exit0": (block("import sys\nsys.exit(0)"), "error"),
    "os_exit": (block("import os\nos._exit(0)"), "error"),
    "fake_pass": (block("print('@@evotui-result@@' + '0' * 32 + '{\"status\": \"passed\"}')"), "failed"),
    "syntax": (block("def has_close_elements(numbers, threshold)\n    return False"), "error"),
    "signature": (block("def has_close_elements(numbers):\n    return False"), "error"),
    "runtime": (block("def has_close_elements(numbers, threshold):\n    return numbers[99]"), "error"),
    "loop": (block("def has_close_elements(numbers, threshold):\n    while True:\n        pass"), "timeout"),
    "prints": (block("def has_close_elements(numbers, threshold):\n    print(True)"), "failed"),
    "empty": ("", "no_code"),
}


@pytest.fixture(scope="module")
def verdicts(env):
    t = env.task("HumanEval/0")
    return dict(zip(CASES, env.evaluate_many([(t, c) for c, _ in CASES.values()])))


@pytest.mark.parametrize("name", list(CASES))
def test_statuses(verdicts, name):
    v = verdicts[name]
    assert v.status == CASES[name][1] and not v.correct, v


def test_failed_assertion_is_named(verdicts):
    assert verdicts["wrong"].detail["failed_assert"].startswith("assert candidate([1.0, 2.0, 3.9")


@pytest.mark.parametrize("name,label", [
    ("empty", "no_code_block"), ("syntax", "syntax_error"), ("signature", "wrong_signature"),
    ("runtime", "runtime_error"), ("wrong", "assertion_failure"), ("loop", "timeout"),
    ("prints", "prints_instead_of_returns"),
])
def test_default_harness_diagnoses(env, harness, verdicts, name, label):
    t = env.task("HumanEval/0")
    r = view(env, t, CASES[name][0], verdicts[name])
    labels = {lab for lab, _ in harness.diagnose(r)}
    assert label in labels, labels
    assert harness.score(r)[1]["passed"] == 0.0


def test_validity_diagnostics(env, harness):
    t = env.task("HumanEval/0")
    hack = block("def has_close_elements(numbers, threshold):\n"
                 "    if numbers == [1.0, 2.0, 3.0]:\n        return False\n"
                 "    if numbers == [1.0, 2.8, 3.0, 4.0, 5.0, 2.0]:\n        return True\n    return False\n"
                 "def check(candidate):\n    pass")
    v = Verdict(False, 0.0, "failed", {})
    labels = {lab for lab, _ in harness.diagnose(view(env, t, hack, v))}
    assert {"special_cases_examples", "redefines_check"} <= labels


def test_canonical_solutions_raise_no_false_alarms(env, harness):
    ok = Verdict(True, 1.0, "passed", {})
    for k, p in load_problems().items():
        t = env.task(k)
        r = view(env, t, block(p["prompt"] + p["canonical_solution"]), ok)
        assert harness.diagnose(r) == [], (k, harness.diagnose(r))
        assert harness.score(r)[0] == pytest.approx(1.1)


def test_extract_code_and_examples():
    text = "a\n```python\nx = 1\n```\nb\n```py\ndef f():\n  pass\n```"
    assert extract_code(text, "f") == ("def f():\n  pass\n", True)
    assert extract_code("```python\ndef f():\n    return 1", "f") == ("def f():\n    return 1", True)  # cut off
    assert extract_code("Sure! def f(): return 2", "f") == ("Sure! def f(): return 2", False)
    assert extract_code("Sure!\ndef f():\n    return 2", "f") == ("def f():\n    return 2", False)
    ex = examples_from_prompt(load_problems()["HumanEval/66"]["prompt"], "digitSum")
    assert {"args": '"abAB"', "parts": ['"abAB"'], "expected": "131"} in ex
