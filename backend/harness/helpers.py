"""Helpers that harness code may call (they are put in its namespace).

Small, pure, and safe on any input: harness functions run on every rollout
and in backtests, so a helper must never raise on odd text.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from backend.envs import math_answer


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


def numbers(text: str) -> list[str]:
    """All numbers in `text`, commas removed.

    >>> numbers("3 apples and 1,200 pears")
    ['3', '1200']
    """
    return [n.replace(",", "") for n in _NUMBER.findall(text or "")]


def last_number(text: str) -> str | None:
    ns = numbers(text)
    return ns[-1] if ns else None


def answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer> tag, or None."""
    found = _TAG.findall(text or "")
    return found[-1].strip() if found else None


def same_answer(pred: str | None, gold: str | None) -> bool:
    """One value each, equal as numbers; nothing is evaluated ("60 + 96" is not 156),
    fractions compare as written (6/8 is not 3/4). See backend/envs/math_answer.py."""
    try:
        return math_answer.same_value(None if pred is None else str(pred), None if gold is None else str(gold))
    except Exception:
        return False


def check_answer(r: Any) -> bool:
    """The math evaluator's own verdict on rollout `r` (its extraction, then the
    dataset's scorer with the task's metadata): True only for a correct answer."""
    try:
        meta = r.meta or {}
        return math_answer.check(meta.get("dataset", ""), r.question or "", r.answer, r.completion or "", meta)[0]
    except Exception:
        return False


def is_expression_echo(question: str, answer_text: str | None) -> bool:
    """The answer text is an unevaluated expression of the question's operands ("60 + 93 - 16")."""
    try:
        return math_answer.is_expression_echo(str(question or ""), None if answer_text is None else str(answer_text))
    except Exception:
        return False


def is_hedged(completion: str) -> bool:
    """The completion gives several candidate answers ("157 or 156", two different tags)."""
    try:
        return math_answer.is_hedged(str(completion or ""))
    except Exception:
        return False


def final_answer(completion: str) -> str | None:
    """Raw text of the evaluator's final answer marker (last tag, box, "answer is" sentence or last line)."""
    try:
        return math_answer.final_answer_text(str(completion or ""))
    except Exception:
        return None


def answer_value(completion: str) -> str | None:
    """The evaluator's value of the final answer, or None where it reads no single value: its
    extraction (docs/evaluator.md), so plain arithmetic ending in one value gives that value.

    >>> answer_value("4 - 1 = 3"), answer_value("The answer is 157. Actually, the answer is 156.")
    ('3', None)
    """
    try:
        value, status = math_answer.extract(str(completion or ""))
    except Exception:
        return None
    return value if status == "answered" else None


def tail(text: str, n: int = 80) -> str:
    t = (text or "").strip().replace("\n", " ")
    return t[-n:]


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def repeated_ngram_share(text: str, n: int = 4) -> float:
    """Share of word n-grams that repeat an earlier one (0 = none, near 1 = a loop)."""
    words = (text or "").split()
    grams = [tuple(words[i:i + n]) for i in range(max(0, len(words) - n + 1))]
    if len(grams) < 4:
        return 0.0
    counts = Counter(grams)
    return sum(c - 1 for c in counts.values()) / len(grams)


def clip(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


HELPERS = {
    "numbers": numbers, "last_number": last_number, "answer_tag": answer_tag,
    "same_answer": same_answer, "check_answer": check_answer, "is_expression_echo": is_expression_echo,
    "is_hedged": is_hedged, "final_answer": final_answer, "answer_value": answer_value, "tail": tail,
    "last_line": last_line,
    "repeated_ngram_share": repeated_ngram_share, "clip": clip,
}
