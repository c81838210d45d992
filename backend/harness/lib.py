"""Helpers that harness code may call (they are put in its namespace).

Small, pure, and safe on any input: harness functions run on every rollout
and in backtests, so a helper must never raise on odd text.
"""

from __future__ import annotations

import re
from collections import Counter

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
    """Numeric or symbolic equality (math-verify), tolerant of formatting."""
    if pred is None or gold is None:
        return False
    from backend.envs.math import answers_match

    try:
        return answers_match(str(gold), str(pred))
    except Exception:
        return False


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
    "same_answer": same_answer, "tail": tail, "last_line": last_line,
    "repeated_ngram_share": repeated_ngram_share, "clip": clip,
}
