"""Harness loading, checks, scoring, diagnostics, advantages, filters."""

import pytest

from backend.envs.base import Task, Verdict
from backend.envs.math import MathEnv, extract_lenient
from backend.harness.loader import Harness, HarnessError, RolloutView, advantages, load_default
from backend.harness.semantics import RolloutOut, filter_and_advantage
from backend.rollout import Scored, agreement, group_stats


def view(completion, answer="-4", question="Calculate 5 - 3 - 6.", finish="stop"):
    return RolloutView(question=question, answer=answer, completion=completion, finish=finish,
                       completion_tokens=10, max_new_tokens=128, obs={}, turns=(), domain="math", meta={})


def test_default_math_harness_scores_and_diagnoses():
    h = load_default("math")
    assert h.score(view("5-3-6 = -4 <answer>-4</answer>"))[0] == pytest.approx(1.1)
    total, comps = h.score(view("The answer is -4."))
    assert total == 0.0 and comps == {"correct": 0.0, "format": 0.0}
    labels = dict(h.diagnose(view("The answer is 5", finish="length")))
    assert {"no_answer_tag", "truncated", "answer_copied_from_prompt"} <= set(labels)
    assert "tail" not in labels["no_answer_tag"] and "answer is 5" in labels["no_answer_tag"]
    assert dict(h.diagnose(view("<answer>7</answer>")))["wrong_value"].startswith("answered '7'")


def test_evaluator_reads_one_final_answer_and_is_separate():
    env = MathEnv(["basic_arithmetic"], heldout_n=2)
    t = Task("t", "math", "Calculate 5 - 3 - 6.", "-4", {"dataset": "basic_arithmetic"})
    assert env.evaluate(t, "5 - 3 - 6 = -4").correct  # no tag: a bare final answer still counts
    assert env.evaluate(t, "The answer is − 4.").correct
    assert not env.evaluate(t, "<answer>4</answer> or -4").correct  # the tag wins
    assert env.evaluate(t, "<answer>5 - 3 - 6</answer>").status == "invalid"  # never evaluated
    assert env.evaluate(t, "<answer>-3 or -4</answer>").status == "ambiguous"
    assert env.evaluate(t, "nothing").status == "no_answer"
    assert extract_lenient("The answer is 1,200.") == "1200" and extract_lenient("1,200 apples") is None


def test_heldout_is_frozen_and_disjoint():
    import random

    env = MathEnv(["basic_arithmetic", "chain_sum"], heldout_n=6)
    a = [t.id for t in env.heldout_tasks()]
    b = [t.id for t in MathEnv(["basic_arithmetic", "chain_sum"], heldout_n=6).heldout_tasks()]
    assert a == b and len(a) == 6
    train = {t.id for t in env.sample_tasks(50, random.Random(0), {"level": 1})}
    assert not train & set(a)


@pytest.mark.parametrize("code, msg", [
    ("import os\n", "import of 'os'"),
    ("x = (1).__class__\n", "private attribute"),
    ("def f(r):\n    return open('/etc/passwd').read()\n", "name 'open'"),
    ("def f(r:\n", "syntax error"),
    ("DOMAIN = 'math'\n", "lacks PROMPT"),
    ("while True:\n    pass\n", "only imports, constants and functions"),
])
def test_hostile_or_broken_harness_rejected(code, msg):
    with pytest.raises(HarnessError, match=msg):
        Harness.from_code(code)


def test_crashing_or_nan_reward_is_contained():
    code = load_default("math").code.replace(
        'def reward_format(r):\n    return 1.0 if', 'def reward_format(r):\n    return float("nan")\n    return 1.0 if')
    h = Harness.from_code(code)
    total, comps = h.score(view("<answer>-4</answer>"))
    assert total == 1.0 and "format" in comps["_errors"]


def test_advantage_rules():
    assert advantages([1, 0], "group_std")[0] > 0 > advantages([1, 0], "group_std")[1]
    assert advantages([1, 1, 1], "group_std") == [0, 0, 0]
    assert advantages([2, 0], "group_mean") == [1, -1]
    assert advantages([0, 5, 9], "rank") == [-1, 0, 1]


def _scored(group, reward, correct, finish="stop"):
    s = Scored(task=Task("t", "math", "q", "1"), group=group, idx=0, prompt_text="", prompt_ids=[1],
               completion="", completion_ids=[1], loss_mask=[1], finish=finish,
               verdict=Verdict(correct, float(correct), "x"), obs={})
    s.reward = reward
    return s


def test_group_stats_dead_groups_and_filters():
    h = load_default("math")
    items = [_scored(0, 0.0, True), _scored(0, 0.0, False), _scored(1, 1.1, True), _scored(1, 0.0, False)]
    outs = [RolloutOut(s.reward, {}, {}, []) for s in items]
    filter_and_advantage([(s.group,) for s in items], outs, [s.finish for s in items], h.spec)
    for s, o in zip(items, outs):
        s.kept, s.advantage = o.kept, o.advantage
    st = group_stats(items, h)
    assert st["dead_group_frac"] == 0.5 and st["kept_groups"] == 1
    assert items[2].advantage > 0 > items[3].advantage and items[0].advantage == 0
    assert st["agreement"] == pytest.approx(0.75)
    assert agreement([0.0], [True], h.weights) == 0.0
