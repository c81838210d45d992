"""Dead groups: the diagnosis that motivates the moves acting on them, and which way each goes.

A group whose rewards all tie teaches GRPO nothing. When most groups of a
round's window are dead, training is stuck, and the moves that can change that
act on what training draws and sees, not on how it scores:

- the curriculum (an easier or harder level, a pass-rate target per group, the
  dataset mix) moves the tasks toward groups with mixed verdicts;
- a hint (a share of the reference solution as a prefix, given by the engine to
  groups that are all wrong) lets such a group find a correct rollout;
- resampling dead groups (dynamic sampling) draws more rollouts for them;
- a longer token budget, where rollouts are cut off before their answer.

    >>> d = diagnose([{"label": "dead_groups", "share": 0.9, "correct_share": 0.05}],
    ...              {"dead_group_frac": 0.9, "n_groups": 40, "accuracy": 0.02})
    >>> d.stuck, round(d.all_wrong, 3)
    (True, 0.855)

Every number here comes from the round's failure table and metrics; `text`
writes them with their sample size and a 95% interval on the dead share, the
evidence a candidate carries for why it was proposed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .diagnose import DEAD
from .failures import FailureRow, RoundMetrics
from .stats import wilson_interval


STUCK = 0.5
"""A window with at least this share of dead groups is stuck: moves acting on dead groups go first."""
TRUNCATED = 0.05
"""A share of cut-off rollouts above which a longer token budget is a move acting on dead groups."""
ALL_WRONG = 0.3
"""A share of rollouts in all-wrong groups above which a hint goes up."""
MIXED = 0.2
"""A dead share below which the moves acting on dead groups go back down (the groups are mixed)."""


@dataclass(frozen=True)
class Diagnosis:
    """What a round's window says of its dead groups."""

    dead: float
    """Share of groups whose rewards all tie (`dead_group_frac`, else the table's dead_groups share)."""
    n_groups: int
    """Groups in the window (0 when the metrics do not say)."""
    all_wrong: float
    """Share of rollouts that sit in a dead group and were judged wrong by the evaluator."""
    truncated: float
    """Share of rollouts cut off at the token budget."""
    accuracy: float | None

    @property
    def stuck(self) -> bool:
        return self.dead >= STUCK

    def text(self) -> str:
        """The diagnosis as evidence: each share with its sample size, the dead share with its interval."""
        ci = ""
        if self.n_groups:
            lo, hi = wilson_interval(round(self.dead * self.n_groups), self.n_groups)
            ci = f" [{lo:.2f}, {hi:.2f}] of {self.n_groups} groups"
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.3f}"
        return (f"dead groups {self.dead:.2f}{ci}; rollouts in all-wrong groups {self.all_wrong:.2f}; "
                f"truncated {self.truncated:.2f}; accuracy {acc}")


ByLabel = Mapping[str, FailureRow]


def _share(table: ByLabel, *labels: str) -> float:
    return float(sum(table[lbl].get("share", 0.0) for lbl in labels if lbl in table))


def of_table(table: ByLabel, metrics: RoundMetrics) -> Diagnosis:
    """The diagnosis from a failure table by label and the window's metrics."""
    row = table.get(DEAD)
    dead_rollouts = float(row.get("share", 0.0)) if row else 0.0
    frac = metrics.get("dead_group_frac")
    return Diagnosis(dead=float(frac) if frac is not None else dead_rollouts,
                     n_groups=int(metrics.get("n_groups") or 0),
                     all_wrong=dead_rollouts * (1.0 - float(row.get("correct_share", 0.0))) if row else 0.0,
                     truncated=_share(table, "truncated", "out_of_tokens"), accuracy=metrics.get("accuracy"))


def diagnose(table: list[FailureRow], metrics: RoundMetrics) -> Diagnosis:
    """The diagnosis from a round's failure table (a list, most frequent first) and metrics."""
    return of_table({e["label"]: e for e in table}, metrics)


# ---------------------------------------------------------------- which way each move goes
# (failure table by label, round metrics) -> +1 up, -1 down, 0 no preference (`space.Knob.prefer`)

def hint_way(t: ByLabel, m: RoundMetrics) -> int:
    """Up where many groups are all wrong (no rollout to learn from), down once groups are mixed."""
    d = of_table(t, m)
    return 1 if d.all_wrong >= ALL_WRONG else (-1 if d.dead < MIXED else 0)


def resample_way(t: ByLabel, m: RoundMetrics) -> int:
    """Up where groups are stuck but the policy is sometimes right (a few more draws may mix a
    group); down once groups are mixed."""
    d = of_table(t, m)
    return 1 if d.stuck and (d.accuracy or 0.0) > 0 else (-1 if d.dead < MIXED else 0)


def target_way(t: ByLabel, m: RoundMetrics) -> int:
    """A pass-rate target switched on (up) in a stuck window, eased off (down) once groups are mixed."""
    d = of_table(t, m)
    return 1 if d.stuck else (-1 if d.dead < MIXED else 0)


def tokens_way(t: ByLabel, m: RoundMetrics) -> int:
    """A longer budget where rollouts are cut off before their answer."""
    return 1 if of_table(t, m).truncated > TRUNCATED else 0
