"""Comparing members: the same validation problems, paired, with 95% intervals.

At a comparison step t every member has evaluated the validation split at t
(its `evals` row). The problems every member answered are paired problem by
problem (`evolve.stats.paired_binary`, the interval the gate uses): the best
member is the one with the highest accuracy on them (ties: the lower index),
and each other member gets its difference to the best with its interval. A
member whose interval lies wholly below 0 is clearly behind.

The best is picked after looking at the same answers, so each of the N - 1
comparisons against it is one of a family: their intervals are simultaneous
95% intervals (Bonferroni, alpha 0.05 / (N - 1) each). With plain 95%
intervals the leader's luck alone put a member "clearly behind" too often near
the floor, and its copy erased a member that would have become the best.

An event's outcome is read the same way at the next comparison: the member
against its parent, won (interval above 0), lost (below 0) or tied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.evolve.stats import ALPHA, Effect, paired_binary
from backend.store import Store, StoreError

from .store import Outcome, Score


@dataclass(frozen=True)
class Validation:
    """One member's validation at a step: {task_id: correct} and its `evals` row."""

    member: int
    eval_id: int
    correct: dict[str, bool]


def validation_at(run_dir: Path, member: int, step: int) -> Validation:
    """Member's validation evaluation at `step`; StoreError when it has none there."""
    s = Store.open(run_dir, readonly=True)
    try:
        row = s.latest_eval("validation")
        if row is None or row["step"] != step:
            raise StoreError(f"member m{member} has no validation evaluation at step {step} ({run_dir})")
        return Validation(member, int(row["id"]), s.eval_outcomes(row["id"]))
    finally:
        s.close()


def rise_since_last(run_dir: Path, step: int) -> Effect | None:
    """A member's validation at `step` minus its own latest validation before `step`, paired over
    the problems both asked (None without an earlier one, or without problems in common)."""
    s = Store.open(run_dir, readonly=True)
    try:
        now, before = s.eval_at(step), s.eval_at(step, before=True)
        if now is None or before is None:
            return None
        a, b = s.eval_outcomes(before["id"]), s.eval_outcomes(now["id"])
    finally:
        s.close()
    ids = sorted(set(a) & set(b))
    return paired_binary([a[t] for t in ids], [b[t] for t in ids]) if ids else None


def common_tasks(vals: list[Validation]) -> list[str]:
    """The problems every member answered, in a fixed order."""
    ids = set(vals[0].correct)
    for v in vals[1:]:
        ids &= set(v.correct)
    return sorted(ids)


def paired(vals: list[Validation], a: int, b: int, alpha: float = ALPHA) -> Effect:
    """Member b minus member a over the problems every member answered."""
    ids = common_tasks(vals)
    by = {v.member: v.correct for v in vals}
    return paired_binary([by[a][t] for t in ids], [by[b][t] for t in ids], alpha=alpha)


def against_best_alpha(members: int) -> float:
    """Each comparison's alpha when N members are compared with the best of them (Bonferroni).

    >>> against_best_alpha(3)
    0.025
    """
    return ALPHA / max(members - 1, 1)


def score(vals: list[Validation], step: int) -> list[Score]:
    """Every member's score at one comparison, paired against the best member."""
    ids = common_tasks(vals)
    correct = {v.member: sum(v.correct[t] for t in ids) for v in vals}
    best = max(sorted(correct), key=lambda m: correct[m])  # max keeps the first: the lower index on a tie
    alpha = against_best_alpha(len(vals))
    out = []
    for v in vals:
        e = paired(vals, best, v.member, alpha) if v.member != best else None
        out.append(Score(step=step, member=v.member, n=len(ids), correct=correct[v.member],
                         acc=correct[v.member] / max(len(ids), 1), best=v.member == best,
                         diff=e.effect if e else 0.0, low=e.ci_low if e else 0.0, high=e.ci_high if e else 0.0,
                         behind=bool(e and e.ci_high < 0), eval_id=v.eval_id))
    return out


def outcome(vals: list[Validation], member: int, parent: int, step: int) -> Outcome:
    """Did `member` beat `parent` at this comparison (paired, by its interval)?"""
    e = paired(vals, parent, member)
    result = "won" if e.ci_low > 0 else "lost" if e.ci_high < 0 else "tied"
    return Outcome(result, step, e.effect, e.ci_low, e.ci_high, e.n)
