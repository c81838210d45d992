"""The cpu profile's first run: its starting harness, and what its first evolution round tries.

No model: a synthetic run (`synthetic_run.py`, real store, real harness worker, real evaluator)
at the cpu profile's sizes, written the way SmolLM2-135M answers under the cpu starting harness:
a few answers the evaluator calls correct, almost none in <answer> tags. The round at the
profile's first evolution step must diagnose `no_answer_tag`, put the move that failure points
at (lenient extraction) first among the proposer's candidates, and pass it on `signal` because
groups come alive where the evaluator's verdicts differ, not by a shaping term.
"""

from __future__ import annotations

import json

import pytest

from backend import profiles
from backend.config import load_config
from backend.evolve import run_round
from backend.harness.loader import Harness
from synthetic_run import build_run, context

CPU_MIX = {"correct": 0.1, "wrong": 0.45, "rambling": 0.43, "tagged": 0.02}
"""About the cpu starting harness's rate on training tasks (8 of 96 correct by the evaluator, 5
of 96 tagged; docs/results/cpu-first-run/)."""


@pytest.fixture
def cpu_cfg():
    return load_config(None, ["profile=cpu"])


def test_the_cpu_profile_starts_math_from_its_own_harness(cpu_cfg):
    assert cpu_cfg.harness == str(profiles.starting_harness("cpu", "math"))
    h = Harness.from_file(cpu_cfg.harness)
    assert h.curriculum["level"] == 0 and h.spec.sampling["max_new_tokens"] <= cpu_cfg.train.max_new_tokens_cap
    # the failure the first round is to find is still there: correctness is paid on a tag only
    assert "def extract_answer(r):\n    return answer_tag(r.completion)" in h.code
    assert load_config(None, ["profile=cpu", "domain=code"]).harness == ""  # other domains: their default
    assert load_config(None, ["profile=gpu"]).harness == ""
    assert load_config(None, ["profile=cpu", "harness=" + cpu_cfg.harness.replace("math_cpu", "math")]).harness \
        .endswith("math.py")  # a harness the run names wins


def test_the_first_round_tries_the_fix_the_dominant_failure_points_at_first(tmp_path, cpu_cfg):
    code = Harness.from_file(cpu_cfg.harness).code
    steps = cpu_cfg.evolve.every
    store = build_run(tmp_path / "run.db", steps=steps, harness_code=code, mix=CPU_MIX, cfg=cpu_cfg,
                      groups=cpu_cfg.train.tasks_per_step, group_size=cpu_cfg.train.group_size)
    try:
        store.set_run(auto_promote=1)  # `make run` is headless: auto-promote
        report = run_round(context(store, step=steps, cfg=cpu_cfg)).report
        assert report.error is None
        (rnd,) = store.rows("SELECT failure_table_json FROM rounds")
        top = json.loads(rnd["failure_table_json"])[0]
        assert top["label"] == "no_answer_tag" and top["share"] > 0.8
        rows = store.rows("SELECT * FROM interventions ORDER BY id")
        proposed = [r for r in rows if json.loads(r["params_json"] or "{}").get("template") is not None]
        assert proposed and json.loads(proposed[0]["params_json"])["template"] == "lenient_extraction", \
            [r["title"] for r in rows]
        lenient = proposed[0]
        assert lenient["status"] == "promoted", lenient["reason"]
        (bt,) = store.rows("SELECT * FROM backtests WHERE intervention_id = ?", (lenient["id"],))
        m = json.loads(bt["metrics_json"])
        assert m["decision"]["metric"] == "signal" and m["decision"]["ci_low"] > cpu_cfg.evolve.min_gain
        assert m["revived"] >= 1
        # every revived group holds both verdicts: alive because the evaluator's outcomes differ
        correct = {(r["step"], r["group_idx"], r["idx"]): bool(r["correct"]) for r in
                   store.rows("SELECT step, group_idx, idx, correct FROM rollouts")}
        for step, g in m["revived_examples"]:
            verdicts = {v for (s, gi, _), v in correct.items() if (s, gi) == (step, g)}
            assert verdicts == {True, False}
    finally:
        store.close()


@pytest.mark.parametrize("text", ["4 - 1 = 3", "So:\n4 - 1 = 3", "The answer is 3.", "<answer>3</answer>", "4 - 1",
                                  "<answer>4 - 1 = 3</answer>", "3 or 4", "The answer is 4. Actually, the answer is 3.",
                                  "4 - 1 = 5", "I think so"])
def test_lenient_extraction_pays_what_the_evaluator_calls_correct(text):
    """The CPU model's correct answers are mostly bare arithmetic ("4 - 1 = 3"): lenient
    extraction must read the evaluator's value there, or it revives fewer groups than the
    evaluator's verdicts allow (and pays nothing the evaluator rejects)."""
    from backend.envs import math_answer
    from backend.evolve.templates import LENIENT
    from backend.harness.helpers import answer_value, is_hedged, same_answer

    assert "answer_value(r.completion)" in LENIENT["evaluator"]
    pred = None if is_hedged(text) else answer_value(text)
    verdict = math_answer.check("basic_arithmetic", "Calculate 4 - 1.", "3", text, {})[0]
    assert same_answer(pred, "3") == verdict
