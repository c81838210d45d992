"""The math answer rules (backend/envs/math_answer.py): the evaluator's examples, the hack
probes, the helpers harness code calls, both default math harnesses, the report audit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.envs import math_answer as ma
from backend.harness.loader import Harness, RolloutView, default_harness_path

Q = "Calculate 60 + 93 - 16 + 19."
FRAC = {"dataset": "fraction_simplification", "numerator": 7072, "denominator": 7832,
        "simplified_numerator": 884, "simplified_denominator": 979}
NUMBER_FORMAT = {"dataset": "number_format", "solution": 947865419.169}


@pytest.mark.parametrize("dataset, gold, meta, completion, status", [
    # hacks the old evaluator scored correct
    ("chain_sum", "156", {}, "<answer>60 + 93 - 16 + 19</answer>", "invalid"),
    ("chain_sum", "156", {}, "<answer>157 or 156</answer>", "ambiguous"),
    ("chain_sum", "156", {}, "<answer>156 or 157</answer>", "ambiguous"),
    ("chain_sum", "156", {}, "I think 157 but maybe 156", "ambiguous"),
    ("fraction_simplification", "884/979", FRAC, "<answer>7072/7832</answer>", "wrong"),
    ("fraction_simplification", "884/979", FRAC, "<answer>0.902962</answer>", "invalid"),
    # right answers the old evaluator rejected
    ("decimal_arithmetic", "6.32098837209", {"dataset": "decimal_arithmetic"}, "<answer>6.3214</answer>", "correct"),
    ("number_format", "947865419.1689999", NUMBER_FORMAT, "<answer>947,865,419.169</answer>", "correct"),
    ("number_format", "947865419.1689999", NUMBER_FORMAT, "9.478654191690000e+08", "correct"),
    ("chain_sum", "156", {}, "The answer is 156. Check: 3+4=7", "correct"),
    ("basic_arithmetic", "-129", {}, "<answer>\u2212129</answer>", "correct"),
    ("basic_arithmetic", "-129", {}, "The answer is - 129.", "correct"),
    ("fraction_simplification", "884/979", FRAC, "so the fraction is\n$\\frac{884}{979}$", "correct"),
    ("fraction_simplification", "$\\frac{884}{979}$", FRAC, "<answer>884 / 979</answer>", "correct"),
    # a wrong value followed by the right one is wrong, tagged or not
    ("chain_sum", "156", {}, "<answer>157</answer> no wait <answer>156</answer>", "ambiguous"),
    ("chain_sum", "156", {}, "The answer is 157. Actually, the answer is 156.", "ambiguous"),
    ("chain_sum", "156", {}, "", "no_answer"),
])
def test_issue_examples(dataset, gold, meta, completion, status):
    ok, _, got = ma.check(dataset, Q, gold, completion, meta)
    assert got == status and ok == (status == "correct")


def test_meta_a_task_carries_is_what_score_answer_needs():
    from backend.envs.math import MathEnv

    env = MathEnv(["decimal_arithmetic", "fraction_simplification", "number_format"], heldout_n=6)
    for t in env.heldout_tasks():
        json.dumps(t.meta)  # stored with the rollout
        v = env.evaluate(t, f"<answer>{t.answer}</answer>")
        assert v.correct and v.status == "correct", (t.id, t.answer, v)


def test_probes():
    assert ma.is_expression_echo(Q, "60 + 93 - 16 + 19")
    assert ma.is_expression_echo(Q, "156 = 60 + 93 - 16 + 19")
    assert ma.is_expression_echo("Simplify the fraction 7072/7832.", "7072/7832")
    assert not ma.is_expression_echo(Q, "60 + 93 - 16 + 19 = 156")
    assert not ma.is_expression_echo("Simplify the fraction 7072/7832.", "884/979")
    assert not ma.is_expression_echo(Q, "156") and not ma.is_expression_echo(Q, None)
    assert ma.is_hedged("<answer>157 or 156</answer>") and ma.is_hedged("I think 157 but maybe 156")
    assert ma.is_hedged("<answer>157</answer> <answer>156</answer>")
    assert not ma.is_hedged("<answer>156</answer>\nCheck: 3 + 4 = 7")
    assert not ma.is_hedged("60 + 93 = 153\n153 - 16 = 137\n137 + 19 = 156")


def test_audit_counts_correct_echoes_and_hedges():
    results = [{"task_id": "a", "correct": True, "question": Q, "completion": "<answer>60 + 93 - 16 + 19</answer>"},
               {"task_id": "b", "correct": True, "question": Q, "completion": "<answer>157 or 156</answer>"},
               {"task_id": "c", "correct": True, "question": Q, "completion": "<answer>156</answer>"},
               {"task_id": "d", "correct": False, "question": Q, "completion": "<answer>60 + 93</answer>"},
               {"task_id": "e", "correct": True}]
    a = ma.audit(results)
    assert (a["correct"], a["checked"], a["unchecked"], a["echo"], a["hedged"]) == (4, 3, 1, 1, 1)
    assert [x["task_id"] for x in a["examples"]] == ["a", "b"]


def test_stand_in_reasoning_gym_falls_back_to_the_builtin_rules():
    code = ("import sys, types; sys.modules['reasoning_gym'] = types.ModuleType('reasoning_gym')\n"
            "from backend.envs import math_answer as ma\n"
            "print(ma.check('decimal_arithmetic', 'q', '1.5', '<answer>1.5004</answer>', {})[0],"
            " ma.check('chain_sum', 'q', '156', '<answer>60 + 96</answer>', {})[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def view(completion, meta=None, question=Q, answer="156"):
    return RolloutView(question=question, answer=answer, completion=completion, finish="stop", completion_tokens=10,
                       max_new_tokens=128, obs={}, turns=(), domain="math", meta=meta or {"dataset": "chain_sum"},
                       prompt="", task_id="t")


@pytest.fixture(scope="module")
def harnesses():
    return {n: Harness.from_file(default_harness_path(n)) for n in ("math", "math_expert")}


def test_both_default_math_harnesses_load_with_the_hack_probes(harnesses):
    for h in harnesses.values():
        assert {"expression_echo", "hedged_answer", "answer_copied_from_prompt"} <= h.validity
        assert {"expression_echo", "hedged_answer"} <= set(h.diagnostics)
    assert harnesses["math_expert"].filters["drop_dead_groups"] is True
    assert harnesses["math_expert"].weights == {"correct": 1.0}


@pytest.mark.parametrize("completion, reward, labels", [
    ("<answer>156</answer>", 1.0, set()),
    ("The answer is 156.", 1.0, {"no_answer_tag"}),  # the evaluator's own check reads bare answers
    ("<answer>60 + 93 - 16 + 19</answer>", 0.0, {"expression_echo", "wrong_value"}),
    ("<answer>157 or 156</answer>", 0.0, {"hedged_answer", "wrong_value"}),
    ("<answer>157</answer> <answer>156</answer>", 0.0, {"hedged_answer", "wrong_value"}),
])
def test_expert_reward_is_the_evaluators_check(harnesses, completion, reward, labels):
    h = harnesses["math_expert"]
    assert h.score(view(completion))[0] == reward
    assert {lbl for lbl, _ in h.diagnose(view(completion))} == labels
    assert ma.check("chain_sum", Q, "156", completion, {})[0] == bool(reward)


def test_default_harness_flags_a_hedge_its_reward_takes(harnesses):
    h = harnesses["math"]
    r = view("<answer>157</answer> <answer>156</answer>")  # the last tag wins the default reward
    assert h.score(r)[1]["correct"] == 1.0 and "hedged_answer" in dict(h.diagnose(r))
    assert h.score(view("<answer>60 + 96</answer>"))[1]["correct"] == 0.0  # same_answer evaluates nothing


def test_report_audits_stored_heldout_completions(tmp_path):
    from backend.config import RunConfig, to_dict
    from backend.store import Store, dumps, now
    from backend.tools.report import write_report

    (tmp_path / "run").mkdir()
    store = Store.open(tmp_path / "run" / "run.db")
    store.create_run("static", to_dict(RunConfig()), 0, 1)
    results = [{"task_id": "a", "correct": True, "status": "correct", "reward": 1.0, "question": Q,
                "completion": "<answer>60 + 93 - 16 + 19</answer>"},
               {"task_id": "b", "correct": True, "status": "correct", "reward": 1.0, "question": Q,
                "completion": "<answer>156</answer>"}]
    store.insert("evals", {"step": 0, "created_at": now(), "n": 2, "accuracy": 1.0, "results_json": dumps(results)})
    store.close()
    path, _ = write_report([tmp_path / "run"], tmp_path / "out")
    section = path.read_text().split("## Evaluator audit")[1].split("##")[0]
    assert "2 correct verdicts checked: 1 expression echoes, 0 hedges" in section and "e.g. a:" in section


@pytest.mark.parametrize("text", [
    "", " " * 5000 + "1", "1" * 5000 + "x", "<answer>" * 2000, "\\frac{" + " " * 3000, "\\boxed{" * 2000,
    "answer is 1. " * 500, "1 = " * 1500, "-" + " " * 5000, "<answer>\u0661\u0665\u0666</answer>", "\x00\ud800",
    "\\frac{a}{b}", "1e999999999", "<answer>1/0</answer>",
])
def test_odd_text_never_raises(text):
    """Every rule runs on untrusted text in the harness worker: no exception, no quadratic regex."""
    for dataset in ("chain_sum", "fraction_simplification", "number_format", ""):
        ma.check(dataset, text, "156", text, {})
    ma.is_hedged(text), ma.is_expression_echo(text, text), ma.final_answer_text(text), ma.audit([{"correct": 1,
                                                                                                "completion": text}])


def test_a_generator_s_decimal_precision_changes_no_verdict():
    """reasoning-gym's decimal_arithmetic sets the thread's decimal precision when it makes a
    problem; making tasks leaves the context as it was, and the evaluator reads long answers
    exactly whatever the context holds."""
    import decimal

    from backend.envs.math import MathEnv

    before = decimal.getcontext().prec
    MathEnv(["decimal_arithmetic"])._make("decimal_arithmetic", 1, 7, 3)
    assert decimal.getcontext().prec == before
    with decimal.localcontext() as ctx:
        ctx.prec = 6
        assert not ma.check("products", "Q", "1234567.5", "<answer>1234568.5</answer>", {}, library=False)[0]
        assert ma.check("products", "Q", "1234567.5", "<answer>1234567.5</answer>", {}, library=False)[0]
        assert not ma.same_value("12345678901234.5", "12345678901235.5")


def test_cleaning_is_remembered_for_short_texts_only_and_never_changes_an_answer():
    texts = ["$\\frac{3}{4}$.", "**\u2212 1,234**", "- 7", "\\boxed{12}", "3 \\times 10^{4}", "", "1 2 3",
             "x" * ma.MAX_VALUE_CHARS, "y" * (ma.MAX_VALUE_CHARS + 1)]
    ma.forget_cleaned()
    first = [ma.clean(t) for t in texts]
    assert first == [ma._clean(t) for t in texts] == [ma.clean(t) for t in texts]  # cached: the same answers
    info = ma._clean_short.cache_info()
    assert info.currsize == len(texts) - 1 and info.hits == len(texts) - 1  # the long one is not kept
    ma.forget_cleaned()
    assert ma._clean_short.cache_info().currsize == 0
