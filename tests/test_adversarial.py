"""Adversarial replay: a reward that pays perturbed wrong rollouts more than the incumbent
does is blocked, whatever its replay on the policy's own rollouts shows."""

import pytest

from backend.evolve import submit
from backend.evolve.edit import replace_name, set_constant
from backend.harness.loader import default_harness_path
from synthetic_run import build_run, context

DEFAULT = default_harness_path("math").read_text()
HONEST = ("def extract_answer(r):\n"
          "    return None if is_hedged(r.completion) else final_answer(r.completion)\n")
GREEDY = {
    # lenient reading that also pays length: longer answers look more careful
    "pad": ("def reward_correct(r):\n    pred = None if is_hedged(r.completion) else final_answer(r.completion)\n"
            "    return (1.0 if same_answer(pred, r.answer) else 0.0) + min(1.0, r.completion_tokens / 100)\n"),
    # the gold answer among the numbers of the text
    "spray": "def reward_correct(r):\n    return 1.0 if r.answer in numbers(r.completion) else 0.0\n",
    # the gold answer anywhere in the text
    "gold_after": "def reward_correct(r):\n    return 1.0 if str(r.answer) in r.completion else 0.0\n",
    # any tag counts as an answer
    "tag_wrong": "def reward_correct(r):\n    return 1.0 if answer_tag(r.completion) is not None else 0.0\n",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("adv") / "run.db", steps=6)


@pytest.mark.parametrize("kind", sorted(GREEDY))
def test_gameable_rewards_are_blocked(store, kind):
    res = submit(context(store), replace_name(DEFAULT, "reward_correct", GREEDY[kind]), f"greedy {kind}")
    assert res.status == "failed", res.reason
    assert res.reason.startswith("blocked by adversarial replay: pays '"), res.reason


def test_a_format_weight_that_pays_any_tag_is_blocked(store):
    res = submit(context(store), set_constant(DEFAULT, "REWARD_WEIGHTS", {"correct": 1.0, "format": 1.0}),
                 "format weight up")
    assert res.status == "failed" and "'tag_wrong'" in res.reason, res.reason


def test_the_evaluators_own_reading_passes_with_statistics(store):
    res = submit(context(store), replace_name(DEFAULT, "extract_answer", HONEST), "honest lenient")
    assert res.status == "passed", res.reason
    row = store.rows("SELECT * FROM backtests WHERE intervention_id = ?", (res.id,))[0]
    assert row["metric"] == "signal" and row["ci_low"] > 0.02 and row["n"] > 0 and row["p_value"] < 0.05


def test_gold_after_working_is_a_hedge_so_the_evaluators_reading_passes(tmp_path):
    """Wrong rollouts that end in working ("the total = 15.") plus "Or maybe the answer is GOLD"
    (the gold_after copies) are hedges to the evaluator and to its reading, so lenient extraction
    is not blocked for paying them (seen on the GPU, where it was, before this rule)."""
    import json

    s = build_run(tmp_path / "run.db", steps=6)
    for r in s.rows("SELECT id, task_json FROM rollouts WHERE correct = 0"):
        gold = int(json.loads(r["task_json"])["answer"])
        s.update("rollouts", r["id"], {"completion": f"Adding them up, the total = {gold + 3}.", "verdict": "wrong"})
    res = submit(context(s), replace_name(DEFAULT, "extract_answer", HONEST), "honest lenient")
    assert res.status == "passed", res.reason
