"""The typed rows a round's window is observed as: its failure table and its metrics.

Their own module so that the round's records and the diagnosis both use them without either
importing the other."""

from __future__ import annotations

from typing import TypedDict


class FailureRow(TypedDict):
    """One failure label of a round's window (`failure_table`), as the `rounds` row keeps it."""

    label: str
    count: int
    validity: int
    """1 when the label flags a reward the evaluator would not give (a validity label)."""
    examples: list[int]
    """Up to EXAMPLES rollout ids."""
    share: float
    """Of all rollouts in the window."""
    trend: float
    """Share in the later half of the window minus the earlier half (positive: growing)."""
    correct_share: float
    """How often the evaluator still said correct."""


class RoundMetrics(TypedDict, total=False):
    """A round window's metrics (`round_metrics`); None where the window has too little to say."""

    steps: list[int]
    n_rollouts: int
    n_groups: int
    dead_group_frac: float | None
    accuracy: float | None
    reward_auc: float | None
    divergence: float | None
    agreement: float | None
    length_drift: float | None
    entropy_drift: float | None
    mean_completion_tokens: float | None
    entropy: float | None
