"""Built-in intervention templates for the offline proposer.

A template knows which failure modes it answers (its `score` reads the
failure table), and how to write one single-factor edit of a harness with
parameters drawn from a small space (parameter mutation). Each returns None
when it does not fit the harness (e.g. no `extract_answer` to make lenient).

The first two are the fixes the default math run needs: SmolLM2-135M rarely
writes <answer> tags, so the tag-only reward gives every rollout 0 and most
groups are dead, while the evaluator (which falls back to the last number)
still finds correct answers. Lenient extraction or partial format credit
revive those groups.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from .aggregate import DEAD
from .edit import Edit, constant, literal_source, top_level

LENIENT = {
    "evaluator": (
        "def extract_answer(r):\n"
        "    # the evaluator's own reading: last tag, else a box, else an 'answer is' sentence, else the last\n"
        "    # line; nothing when the completion hedges between answers\n"
        "    return None if is_hedged(r.completion) else final_answer(r.completion)\n"),
}
LENIENT_REWARD = (
    "def reward_correct(r):\n"
    "    # the evaluator's own reading of the final answer, tagged or not; nothing for a hedge\n"
    "    pred = None if is_hedged(r.completion) else final_answer(r.completion)\n"
    "    return 1.0 if same_answer(pred, r.answer) else 0.0\n")
PARTIAL_FORMAT = (
    "def reward_format(r):\n"
    "    # full credit for the tag; partial credit for ending on a plain final answer\n"
    "    if answer_tag(r.completion) is not None:\n"
    "        return 1.0\n"
    "    return {partial} if last_number(last_line(r.completion)) is not None else 0.0\n")
ALL = ("math", "code", "swe")
PROMPTS = [
    "Solve the problem step by step. End your reply with the final answer inside "
    "<answer></answer> tags, like <answer>42</answer>.",
    "Give the final answer on its own last line as <answer>NUMBER</answer>. "
    "Example: What is 2 + 3? <answer>5</answer>",
]


@dataclass
class Template:
    id: str
    title: str
    hypothesis: str
    expected: str
    score: Callable[[dict, dict], float]
    """(failure table by label, round metrics) -> how well this template fits (0 = not at all)."""
    make: Callable[[str, random.Random, dict], tuple[Edit, dict] | None]
    """(parent code, rng, context) -> (the edit, its parameters), or None when it does not fit."""
    target: str = ""
    domains: tuple = ("math",)
    """Domains whose harnesses this template understands (the generic ones edit only shared constants)."""


def _share(table: dict, label: str) -> float:
    return table.get(label, {}).get("share", 0.0)


def _missed_correct(table: dict, label: str) -> float:
    """Share of the window that carries `label` although the evaluator said correct:
    answers the reward cannot see."""
    e = table.get(label, {})
    return e.get("share", 0.0) * e.get("correct_share", 0.0)


def _is_function(code: str, name: str) -> bool:
    return name in top_level(code) and f"def {name}(" in code


def _lenient(code, rng, ctx):
    if _is_function(code, "extract_answer"):
        variant = rng.choice(sorted(LENIENT))
        return Edit("replace", "extract_answer", LENIENT[variant]), {"fallback": variant}
    if _is_function(code, "reward_correct"):
        return Edit("replace", "reward_correct", LENIENT_REWARD), {"fallback": "evaluator"}
    return None


def _partial_format(code, rng, ctx):
    if not _is_function(code, "reward_format"):
        return None
    partial = rng.choice([0.25, 0.5])
    return Edit("replace", "reward_format", PARTIAL_FORMAT.format(partial=partial)), {"partial": partial}


def _set(name: str, update: Callable[[dict, random.Random, dict], dict | None]):
    """A template maker that changes one key of a dict constant."""
    def make(code, rng, ctx):
        value = constant(code, name)
        if not isinstance(value, dict):
            return None
        new = update(dict(value), rng, ctx)
        if new is None or new == value:
            return None
        changed = {k: new[k] for k in new if value.get(k) != new[k]}
        return Edit("replace", name, f"{name} = {literal_source(new)}"), changed
    return make


def _format_weight(w, rng, ctx):
    if "format" not in w:
        return None
    w["format"] = round(w["format"] * rng.choice([2.0, 3.0]), 3)
    return w


def _more_tokens(s, rng, ctx):
    cap = ctx.get("max_new_tokens_cap", 512)
    s["max_new_tokens"] = min(cap, int(s.get("max_new_tokens", 128) * rng.choice([1.5, 2.0])))
    return s


def _cooler(s, rng, ctx):
    s["temperature"] = round(float(s.get("temperature", 1.0)) * rng.choice([0.7, 0.85]), 3)
    return s


def _prompt(p, rng, ctx):
    options = [t for t in PROMPTS if t != p.get("system")]
    p["system"] = rng.choice(options)
    return p


def _level(delta):
    def update(c, rng, ctx):
        level = int(c.get("level", 1)) + delta
        if level < 0 or level > 3:
            return None
        c["level"] = level
        return c
    return update


def _flag(key):
    def update(f, rng, ctx):
        f[key] = True
        return f
    return update


def _accuracy(m):
    return m.get("accuracy") or 0.0


TEMPLATES = [
    Template("lenient_extraction", "Lenient answer extraction (the evaluator's own reading)",
             "Correct answers written without <answer> tags score 0, so groups tie and GRPO learns nothing.",
             "Reward agrees with the evaluator on untagged answers; dead groups revive.",
             lambda t, m: 2.0 * _missed_correct(t, "no_answer_tag") + _share(t, DEAD) * 0.5,
             _lenient, target="no_answer_tag"),
    Template("partial_format_credit", "Partial format credit for a plain final answer",
             "Untagged but well-formed answers get no signal at all; partial credit separates them from rambling.",
             "Fewer dead groups; the policy is pulled towards a clean final answer line.",
             lambda t, m: _share(t, "no_answer_tag") * 0.8 + _share(t, DEAD) * 0.3,
             _partial_format, target="no_answer_tag"),
    Template("format_weight", "Raise the format reward weight",
             "The format term is too small to move the policy towards tagged answers.",
             "More tagged answers in later steps.",
             lambda t, m: _share(t, "no_answer_tag") * 0.3, _set("REWARD_WEIGHTS", _format_weight),
             target="no_answer_tag"),
    Template("answer_prompt", "Ask for the answer tag with an example",
             "The model does not follow the tag instruction; a concrete example may help.",
             "More rollouts end with <answer>N</answer>.",
             lambda t, m: (_share(t, "no_answer_tag") + _share(t, "empty")) * 0.5, _set("PROMPT", _prompt),
             target="no_answer_tag"),
    Template("drop_truncated", "Drop truncated rollouts from training",
             "Truncated rollouts carry no answer; training on them rewards length.",
             "Cleaner advantages; truncation share falls.",
             lambda t, m: _share(t, "truncated"), _set("FILTERS", _flag("drop_truncated")),
             target="truncated", domains=ALL),
    Template("more_tokens", "Give the policy more new tokens",
             "Answers are cut off before the final line.", "Fewer truncated rollouts, more answers.",
             lambda t, m: _share(t, "truncated") * 0.8, _set("SAMPLING", _more_tokens),
             target="truncated", domains=ALL),
    Template("cooler_sampling", "Lower the sampling temperature",
             "Repetition loops and gibberish come from sampling too hot for a small model.",
             "Fewer repetition labels, more complete answers.",
             lambda t, m: _share(t, "repetition"), _set("SAMPLING", _cooler), target="repetition", domains=ALL),
    Template("easier_curriculum", "Easier curriculum level",
             "Tasks are too hard: almost every group is all-wrong, so nothing is learned.",
             "Higher accuracy and fewer dead groups.",
             lambda t, m: _share(t, DEAD) * (1 - _accuracy(m)) * 0.6, _set("CURRICULUM", _level(-1)),
             target=DEAD),
    Template("harder_curriculum", "Harder curriculum level",
             "Tasks are too easy: groups are all-correct and tie.", "Fewer dead groups.",
             lambda t, m: _share(t, DEAD) * _accuracy(m) * 0.6, _set("CURRICULUM", _level(+1)), target=DEAD),
    Template("drop_dead_groups", "Drop dead groups from training",
             "Groups whose rewards tie only add KL drift and compute.", "Kept batch is all signal.",
             lambda t, m: _share(t, DEAD) * 0.2, _set("FILTERS", _flag("drop_dead_groups")), target=DEAD, domains=ALL),
    Template("drop_invalid", "Drop rollouts flagged invalid",
             "Rollouts that game the reward should not be trained on even when they score.",
             "Invalid rollouts leave the training batch.",
             lambda t, m: sum(e["share"] for e in t.values() if e.get("validity")),
             _set("FILTERS", _flag("drop_invalid")), target="validity", domains=ALL),
]


def by_id(template_id: str) -> Template | None:
    return next((t for t in TEMPLATES if t.id == template_id), None)


def mutate_numbers(source: str, rng: random.Random) -> tuple[str, dict] | None:
    """Scale one float literal of a definition (parameter mutation of a skill's change)."""
    import ast

    tree = ast.parse(source)
    floats = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is float
              and n.value not in (0.0, 1.0)]
    if not floats:
        return None
    node = rng.choice(floats)
    old = node.value
    node.value = round(old * rng.choice([0.5, 1.5, 2.0]), 4)
    return ast.unparse(tree) + "\n", {"mutated": [old, node.value]}
