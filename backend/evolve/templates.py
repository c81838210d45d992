"""The snippet library: code-level edits of a harness that failure labels point to.

Knob settings (sampling, weights, the advantage rule, filters, curriculum,
prompt) are moves in the typed search space (`space.py`); what a knob cannot
express lives here: reward terms, answer extraction and diagnostics written
as code. A snippet knows which failure modes it answers (its `score` reads
the failure table) and writes one single-factor edit of a harness, with
parameters drawn from a small set (parameter mutation). Each returns None
when it does not fit the harness (no `extract_answer` to make lenient, a
diagnostic the harness already has).

The first two are the fixes the default math run needs: SmolLM2-135M rarely
writes <answer> tags, so the tag-only reward gives every rollout 0 and most
groups are dead, while the evaluator (which falls back to the last number)
still finds correct answers. Lenient extraction or partial format credit
revive those groups.

**Partial credit** splits a group that the verdict alone leaves dead, so it
answers dead groups (`rescues`: its candidate carries the dead-group
diagnosis). It is offered only where it cannot be gamed, and always below half
a full pass (a pass still outranks any partial answer, and no partial answer
counts as "the reward says right"):

- code: the share of a generated task's hidden test cases passed, only when
  the tests ran and failed (not an error, a timeout or a tampered runner), and
  never for a rollout a validity diagnostic of the harness flags or one that
  returns a constant (which passes the cases of the common value by luck).
  The cases are hidden, counted by the driver's secret-stamped report.
- math: partial format credit for a well-formed final answer (above). A
  closeness credit (reward for a near miss) is not offered: on sums whose
  largest operand dominates, "that operand plus one" is a near miss that
  needs no computing and appears nowhere in the prompt for a copy check to
  catch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, TypedDict

from backend.types import JSON

from .diagnose import DEAD, UNLABELED
from .edit import Edit, constant, definition, top_level


LENIENT = {
    "evaluator": (
        "def extract_answer(r):\n"
        "    # the evaluator's own reading: the value of the last tag, else a box, else an 'answer is'\n"
        "    # sentence, else the last line (arithmetic ending in one value gives that value); nothing\n"
        "    # when the completion hedges between answers\n"
        "    return None if is_hedged(r.completion) else answer_value(r.completion)\n"),
}
LENIENT_REWARD = (
    "def reward_correct(r):\n"
    "    # the evaluator's own reading of the final answer, tagged or not; nothing for a hedge\n"
    "    pred = None if is_hedged(r.completion) else answer_value(r.completion)\n"
    "    return 1.0 if same_answer(pred, r.answer) else 0.0\n")
PARTIAL_FORMAT = (
    "def reward_format(r):\n"
    "    # full credit for the tag; partial credit for ending on a plain final answer\n"
    "    if answer_tag(r.completion) is not None:\n"
    "        return 1.0\n"
    "    return {partial} if last_number(last_line(r.completion)) is not None else 0.0\n")
COMPLETE_FORMAT = (
    "def reward_format(r):\n"
    "    # a tag counts only in a completion that finished (not cut off at max_new_tokens)\n"
    "    return 1.0 if answer_tag(r.completion) is not None and r.finish != \"length\" else 0.0\n")
REPETITION = (
    "def diagnose_repetition(r):\n"
    "    share = repeated_ngram_share(r.completion, 4)\n"
    "    if share > {share}:\n"
    "        return f\"{{share:.0%}} of 4-grams repeat\"\n")
DIAGNOSE_TRUNCATED = (
    "def diagnose_truncated(r):\n"
    "    if r.finish == \"length\":\n"
    "        return f\"stopped at max_new_tokens ({r.completion_tokens} tokens)\"\n")
PARTIAL_TESTS = (
    "def reward_passed(r):\n"
    "    # full credit for passing every test; for tests that ran and failed, partial credit for the\n"
    "    # share of hidden cases passed, never for a flagged rollout or a constant answer\n"
    "    t = tests(r)\n"
    "    if t.get(\"status\") == \"passed\":\n"
    "        return 1.0\n"
    "    total = t.get(\"total\") or 0\n"
    "    if t.get(\"status\") != \"failed\" or not total or facts(r).get(\"returns_constant\"):\n"
    "        return 0.0\n"
    "    if any(flag(r) for flag in ({flags})):\n"
    "        return 0.0\n"
    "    return {scale} * min(1.0, (t.get(\"passed\") or 0) / total)\n")
DIAGNOSE_REPETITION = REPETITION.format(share=0.3)
DIAGNOSE_NO_NUMBER = (
    "def diagnose_no_number(r):\n"
    "    if r.completion.strip() and not numbers(r.completion):\n"
    "        return \"no number anywhere; ends with: \" + tail(r.completion, 60)\n")
ALL = ("math", "code", "swe")


Made = tuple[Edit, JSON] | None
"""What a template's maker returns: the edit and its parameters, or None when it does not apply."""


class MakeContext(TypedDict):
    """What a maker may know of the run besides the parent code."""

    max_new_tokens_cap: int


Maker = Callable[[str, random.Random, MakeContext], Made]


@dataclass
class Template:
    id: str
    title: str
    hypothesis: str
    expected: str
    score: Callable[[JSON, JSON], float]
    """(failure table by label, round metrics) -> how well this template fits (0 = not at all)."""
    make: Maker
    """(parent code, rng, context) -> (the edit, its parameters), or None when it does not fit."""
    target: str = ""
    domains: tuple[str, ...] = ("math",)
    """Domains whose harnesses this template understands (the generic ones edit only shared constants)."""
    rescues: bool = False
    """It revives dead groups: in a stuck window it ranks with the moves acting on them, and its
    candidate carries the dead-group diagnosis (`offline`)."""


def _share(table: JSON, label: str) -> float:
    return float(table.get(label, {}).get("share", 0.0))


def _missed_correct(table: JSON, label: str) -> float:
    """Share of the window that carries `label` although the evaluator said correct:
    answers the reward cannot see."""
    e = table.get(label, {})
    return float(e.get("share", 0.0)) * float(e.get("correct_share", 0.0))


def _missed_of_correct(table: JSON, metrics: JSON, label: str) -> float:
    """Share of the evaluator-correct answers that carry `label`: the part of the signal the
    reward cannot see. A share of the window would rank it last exactly when it matters
    most, under a weak policy (at 4% accuracy, half of the correct answers untagged is only
    0.02 of the window)."""
    acc = float(metrics.get("accuracy") or 0.0)
    return min(1.0, _missed_correct(table, label) / acc) if acc > 0 else 0.0


def _is_function(code: str, name: str) -> bool:
    return name in top_level(code) and f"def {name}(" in code


def _lenient(code: str, rng: random.Random, ctx: MakeContext) -> Made:
    if _is_function(code, "extract_answer"):
        variant = rng.choice(sorted(LENIENT))
        return Edit("replace", "extract_answer", LENIENT[variant]), {"fallback": variant}
    current = definition(code, "reward_correct") or ""
    if _is_function(code, "reward_correct") and "check_answer" not in current and "final_answer" not in current:
        return Edit("replace", "reward_correct", LENIENT_REWARD), {"fallback": "evaluator"}
    return None


def _partial_format(code: str, rng: random.Random, ctx: MakeContext) -> Made:
    if not _is_function(code, "reward_format"):
        return None
    partial = rng.choice([0.25, 0.5])
    return Edit("replace", "reward_format", PARTIAL_FORMAT.format(partial=partial)), {"partial": partial}


def _complete_format(code: str, rng: random.Random, ctx: MakeContext) -> Made:
    if not _is_function(code, "reward_format") or "finish" in (definition(code, "reward_format") or ""):
        return None
    return Edit("replace", "reward_format", COMPLETE_FORMAT), {}


def _partial_tests(code: str, rng: random.Random, ctx: MakeContext) -> Made:
    """Partial credit for the share of hidden cases passed, on a code harness whose pass reward is
    pass/fail (`tests` and `facts` read its evidence; VALIDITY names the flags that zero it)."""
    current = definition(code, "reward_passed") or ""
    if not all(_is_function(code, n) for n in ("reward_passed", "tests", "facts")) or "total" in current:
        return None
    validity = constant(code, "VALIDITY")
    labels = [v for v in validity if isinstance(v, str)] if isinstance(validity, list) else []
    flags = "".join(f"diagnose_{v}, " for v in labels if _is_function(code, f"diagnose_{v}"))
    scale = rng.choice([0.25, 0.4])
    return Edit("replace", "reward_passed", PARTIAL_TESTS.format(flags=flags, scale=scale)), {"partial": scale}


def _add_diagnostic(label: str, source: str) -> Maker:
    """A maker that adds `diagnose_<label>` when the harness lacks it."""
    def make(code: str, rng: random.Random, ctx: MakeContext) -> Made:
        if f"diagnose_{label}" in top_level(code):
            return None
        return Edit("add", f"diagnose_{label}", source), {"label": label}
    return make


def _repetition_threshold(code: str, rng: random.Random, ctx: MakeContext) -> Made:
    if not _is_function(code, "diagnose_repetition"):
        return None
    share = rng.choice([0.15, 0.2, 0.45])
    return Edit("replace", "diagnose_repetition", REPETITION.format(share=share)), {"share": share}


def _unlabeled(t: JSON) -> float:
    return _share(t, UNLABELED)


TEMPLATES = [
    Template("lenient_extraction", "Lenient answer extraction (the evaluator's own reading)",
             "Correct answers written without <answer> tags score 0, so groups tie and GRPO learns nothing.",
             "Reward agrees with the evaluator on untagged answers; dead groups revive.",
             lambda t, m: 2.0 * _missed_of_correct(t, m, "no_answer_tag") + _share(t, DEAD) * 0.5,
             _lenient, target="no_answer_tag", rescues=True),
    Template("partial_format_credit", "Partial format credit for a plain final answer",
             "Untagged but well-formed answers get no signal at all; partial credit separates them from rambling.",
             "Fewer dead groups; the policy is pulled towards a clean final answer line.",
             lambda t, m: _share(t, "no_answer_tag") * 0.8 + _share(t, DEAD) * 0.3,
             _partial_format, target="no_answer_tag", rescues=True),
    Template("partial_test_credit", "Partial credit for the share of hidden test cases passed",
             "A group whose solutions all fail some test ties at 0 and teaches nothing, though some pass "
             "more cases than others.",
             "Fewer dead groups; solutions that pass more cases are pulled up, a full pass still worth most.",
             lambda t, m: _share(t, DEAD) * 0.6 + _share(t, "assertion_failure") * 0.4,
             _partial_tests, target=DEAD, domains=("code",), rescues=True),
    Template("complete_format", "Format credit only for a completion that finished",
             "A tag in a completion cut off at max_new_tokens is luck, not format; paying it rewards length.",
             "Fewer truncated rollouts score; truncation share falls.",
             lambda t, m: _share(t, "truncated") * 0.6, _complete_format, target="truncated"),
    Template("repetition_threshold", "Move the repetition diagnostic's threshold",
             "The repetition diagnostic fires too early or too late to explain the loops in failed rollouts.",
             "Repetition labels cover the looping failures and spare the correct ones.",
             lambda t, m: _share(t, "repetition") * 0.5 + 0.3 * t.get("repetition", {}).get("correct_share", 0.0)
             + _unlabeled(t) * 0.2, _repetition_threshold, target="repetition", domains=ALL),
    Template("diagnose_truncated", "Diagnose truncated rollouts",
             "Some failures stop at max_new_tokens and no diagnostic says so.",
             "Truncation becomes a label the proposer can act on.",
             lambda t, m: 0.1 + _unlabeled(t) * 0.3, _add_diagnostic("truncated", DIAGNOSE_TRUNCATED),
             target="(unlabeled)", domains=ALL),
    Template("diagnose_repetition", "Diagnose repetition loops",
             "Unexplained failures may be loops that no diagnostic names.",
             "Loops become a label the proposer can act on.",
             lambda t, m: 0.1 + _unlabeled(t) * 0.3, _add_diagnostic("repetition", DIAGNOSE_REPETITION),
             target="(unlabeled)", domains=ALL),
    Template("diagnose_no_number", "Diagnose completions without any number",
             "Some failed completions contain no number at all: the policy rambles instead of computing.",
             "The rambling failures get their own label (and trend).",
             lambda t, m: 0.05 + _unlabeled(t) * 0.5, _add_diagnostic("no_number", DIAGNOSE_NO_NUMBER),
             target="(unlabeled)"),
]


def by_id(template_id: str) -> Template | None:
    return next((t for t in TEMPLATES if t.id == template_id), None)


def mutate_numbers(source: str, rng: random.Random) -> tuple[str, dict[str, list[float]]] | None:
    """Scale one float literal of a definition (parameter mutation of a skill's change)."""
    import ast

    tree = ast.parse(source)
    floats = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is float
              and n.value not in (0.0, 1.0)]
    if not floats:
        return None
    node = rng.choice(floats)
    old = node.value
    assert isinstance(old, float)  # only float constants were picked
    node.value = round(old * rng.choice([0.5, 1.5, 2.0]), 4)
    return ast.unparse(tree) + "\n", {"mutated": [old, node.value]}
