"""The math evaluator against reasoning-gym's own scorer.

For every dataset the product offers (config default, README, the
conformance list), `backend.envs.math_conformance` builds entries and completions of many
kinds with an expected verdict from an oracle that does not use the
evaluator's code (the value the completion means, scored by reasoning-gym's
`score_answer` at full score; several answers or an unevaluated expression
are wrong). Zero false positives; every false negative is listed below.
The tables in docs/evaluator.md come from the same run
(`python -m backend.envs.math_conformance`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backend.config import RunConfig
from backend.envs import math_conformance as mc
from backend.envs.math import LEVELS

N = 30  # entries per dataset (half at level 1, half at the top level where there are levels)

STRICT = {
    "tag_with_words": "a tag holds exactly one value: '<answer>12 in total</answer>' is invalid",
    "answer_with_reason": "an 'answer is' sentence must be a value (or plain arithmetic ending in one)",
    "prose_last_line": "a bare answer needs an answer cue or a line holding only the value: 'So it is 12'",
    "tag_with_equation": "a tag holds exactly one value: '<answer>5 + 7 = 12</answer>' is invalid",
}
"""Accepted false negatives: completions a reader would call right that the documented
extraction rejects on purpose (strict is what makes echoes and hedges unrewardable)."""
ACCEPTED_FALSE_NEGATIVES = {
    "basic_arithmetic": set(STRICT),
    "chain_sum": set(STRICT),
    "products": set(STRICT),
    # "So maybe the answer is 3/4": a hedge word on a line with two numbers reads as a hedge
    # (math_answer._hedged counts a fraction's two parts); consistent working does not save it
    "fraction_simplification": set(STRICT) | {"working_right_then_maybe_same"},
    "decimal_arithmetic": set(STRICT),
    "decimal_chain_sum": set(STRICT),
    # no expression in the question, so no tag_with_equation case
    "number_format": set(STRICT) - {"tag_with_equation"},
    "gcd": set(STRICT) - {"tag_with_equation"},
    "lcm": set(STRICT) - {"tag_with_equation"},
    "leg_counting": set(STRICT) - {"tag_with_equation"},
}
MUST_BE_WRONG = {"hedge_or_right_last", "hedge_or_right_first", "hedge_prose", "hedge_list", "tags_wrong_then_right",
                 "tags_right_then_wrong", "cues_wrong_then_right", "cues_right_then_wrong",
                 "cue_then_tag_wrong_then_right", "lines_wrong_then_right", "working_wrong_then_maybe_right",
                 "expression_echo_tagged",
                 "expression_echo_bare", "unevaluated_sum", "empty", "empty_tag", "tag_self_correction",
                 "boxed_wrong_then_right", "decimal_approx", "outside_tolerance"}


@pytest.fixture(scope="module")
def cases():
    return mc.run(n=N)  # imports reasoning_gym once for the module


def test_every_offered_dataset_is_covered():
    import reasoning_gym

    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    named = {n for n in re.findall(r"`([a-z_]+)`", readme) if n in reasoning_gym.factory.DATASETS}
    offered = set(RunConfig().math.datasets) | set(LEVELS) | named
    issue = {"products", "fraction_simplification", "decimal_arithmetic", "number_format"}
    assert offered | issue <= set(mc.DATASETS)
    assert set(ACCEPTED_FALSE_NEGATIVES) == set(mc.DATASETS)


def test_no_false_positives(cases):
    fp = [c for c in cases if c.false_positive]
    assert not fp, "\n".join(f"{c.dataset} {c.kind} {c.task_id}: {c.completion!r} ({c.status})" for c in fp[:10])


def test_false_negatives_are_exactly_the_listed_ones(cases):
    seen: dict[str, set] = {d: set() for d in mc.DATASETS}
    for c in cases:
        if c.false_negative:
            seen[c.dataset].add(c.kind)
    assert seen == ACCEPTED_FALSE_NEGATIVES


def test_hacks_are_always_wrong_and_tables_are_big_enough(cases):
    by_dataset: dict[str, list] = {}
    for c in cases:
        by_dataset.setdefault(c.dataset, []).append(c)
        if c.kind in MUST_BE_WRONG:
            assert not c.expected and not c.got, (c.dataset, c.kind, c.completion)
    for name, cs in by_dataset.items():
        assert len({c.task_id for c in cs}) == N and len(cs) >= 25 * N, name
        assert {"bare", "tagged", "scientific" if name != "fraction_simplification" else "decimal_approx",
                "hedge_prose", "copied_number", "empty"} <= {c.kind for c in cs}, name
    echoes = {c.dataset for c in cases if c.kind == "expression_echo_tagged"}
    assert {"basic_arithmetic", "chain_sum", "products", "fraction_simplification", "decimal_arithmetic"} <= echoes


def test_builtin_rules_agree_with_reasoning_gym(cases):
    """Where reasoning_gym is a stand-in (replay) or absent, the built-in copy of the scorers
    gives the same verdict on every case."""
    differ = [c for c in cases if c.got != c.got_builtin]
    assert not differ, [(c.dataset, c.kind, c.completion) for c in differ[:5]]


def test_markdown_tables_list_every_dataset_and_kind(cases):
    md = mc.markdown(cases)
    assert all(f"| {d} |" in md for d in mc.DATASETS)
    assert "| expression_echo_tagged |" in md and "| hedge_prose |" in md
