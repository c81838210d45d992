"""The store's rollout rows as evolution reads them: one typed row, converted at the store boundary.

The store returns rows as plain dicts (`backend.store.base.Row`); evolution works on
`RolloutRow`, whose keys are the `rollouts` columns it reads. A query selects the
columns it needs (`REPLAY_COLUMNS` for a replay, fewer for the failure table), so
every key is optional to the type; a probe's rows (`context.Policy.generate`) are
the same rows, made and scored but not stored (no `id`).

    rows = rollout_rows(store.recent_rollouts(lo, hi, 600))   # list[RolloutRow]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict, cast

from backend.store.base import Row


class RolloutRow(TypedDict, total=False):
    """One `rollouts` row, as far as evolution reads it."""

    id: int
    step: int
    group_idx: int
    idx: int
    prompt: str
    completion: str
    finish: str
    completion_tokens: int
    task_json: str
    """The task (question, gold answer, meta) as JSON."""
    obs_json: str
    """The domain's observations as JSON, with the engine's `_max_new_tokens`."""
    domain: str
    task_id: str
    correct: int | None
    """The evaluator's verdict: 1 correct, 0 not (a probe's rows may hold a bool)."""
    reward: float
    verdict: str
    """The evaluator's status: correct, wrong, no_answer, ..."""
    labels: str | None
    """The diagnoses, comma-joined (`backend.store.rollouts.split_labels` reads them)."""
    advantage: float | None
    """What training gave it (0 when not trained on); None in rows stored before it was kept."""


def rollout_rows(rows: Iterable[Row]) -> list[RolloutRow]:
    """The store's rows as `RolloutRow`s (the same dicts: the columns are the store's)."""
    return [cast(RolloutRow, r) for r in rows]
