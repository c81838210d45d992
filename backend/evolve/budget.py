"""What the search cost, in the unit the run's budget is counted in: training rollouts.

    >>> b = search_budget(store)                                     # doctest: +SKIP
    >>> b["search_rollouts"], b["share_of_training"]
    (40.5, 0.126)

The control arm of `evotui compare` spends the co-evolution arm's search on
training, so the search is counted in training rollouts:

- **probes and trials** generate rollouts with the policy: the candidate's
  arm (the backtest row's `n_rollouts`) and the incumbent's arm, which a
  round generates once per mode and shares among its candidates (as many
  rollouts as one candidate arm: the same prompts and sampling seeds);
- **replay** generates nothing; it re-scores stored rollouts in the harness
  worker. Its wall time is converted into rollouts at the run's own rate
  (training milliseconds per training rollout), so a replay that took as long
  as one training rollout counts as one. A round replays all its candidates
  in one batch and each row records the batch's time so far, so a round
  counts its longest replay row, not their sum.
"""

from __future__ import annotations

import math
from typing import Any, TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from backend.store import Store

POPULATION_GATE = "population-gate"
"""The backtest mode of an explore move's safety gate (evolve/explore.py): the worker sandbox
and the adversarial replay over a member's stored rollouts."""
SCORED_ONLY = ("replay", POPULATION_GATE)
"""Backtest modes that re-score stored rollouts and generate none: their cost is time, not
rollouts (counting a gate's replayed rows as generated ones made an explore move look like
two arms of 8,192 fresh rollouts)."""


class ModeCost(TypedDict):
    """The cost of one backtest mode: its backtests, rollouts (candidate and incumbent arms), ms."""

    backtests: int
    rollouts: int
    ms: float


class SearchBudget(TypedDict):
    """What the search cost, against training (`search_budget`)."""

    train_rollouts: int
    candidate_rollouts: int
    incumbent_rollouts: int
    replay_rollouts_scored: int
    replay_ms: float
    replay_rollout_equiv: float
    search_rollouts: float
    share_of_training: float | None
    by_mode: dict[str, ModeCost]


def search_budget(store: Store) -> SearchBudget:
    """{train_rollouts, candidate_rollouts, incumbent_rollouts, replay_rollouts_scored, replay_ms,
    replay_rollout_equiv, search_rollouts, share_of_training, by_mode}; by_mode: per backtest mode,
    {backtests, rollouts (candidate and incumbent arms), ms}."""
    train = store.training_cost()
    candidate = scored = 0
    replay_batches: dict[tuple[str, object], float] = {}
    by_mode: dict[str, ModeCost] = {}
    incumbent_arms: dict[tuple[Any, ...], int] = {}
    for i, b in enumerate(store.backtest_costs()):
        mode = b["mode"] or "?"
        m = by_mode.setdefault(mode, ModeCost(backtests=0, rollouts=0, ms=0.0))
        m["backtests"] += 1
        if mode in SCORED_ONLY:
            scored += b["n_rollouts"]
            batch = (mode, b["round_id"] if b["round_id"] is not None else f"row{i}")
            replay_batches[batch] = max(replay_batches.get(batch, 0.0), b["ms"] or 0.0)
            continue
        m["ms"] += b["ms"]
        candidate += b["n_rollouts"]
        m["rollouts"] += b["n_rollouts"]
        # a candidate outside any round (a hand edit) had its own incumbent arm
        key = (mode, b["round_id"] if b["round_id"] is not None else f"row{i}")
        incumbent_arms[key] = max(incumbent_arms.get(key, 0), b["n_rollouts"])
    for (mode, _), n in incumbent_arms.items():
        by_mode[mode]["rollouts"] += n
    incumbent = sum(incumbent_arms.values())
    replay_ms = sum(replay_batches.values())
    for (mode, _), ms in replay_batches.items():  # a round's replay rows share one batch's time
        by_mode[mode]["ms"] += ms
    per_rollout_ms = train["ms"] / train["rollouts"] if train["rollouts"] and train["ms"] > 0 else None
    equiv = replay_ms / per_rollout_ms if per_rollout_ms else 0.0
    total = candidate + incumbent + equiv
    return {"train_rollouts": train["rollouts"], "candidate_rollouts": candidate, "incumbent_rollouts": incumbent,
            "replay_rollouts_scored": scored, "replay_ms": round(replay_ms, 1),
            "replay_rollout_equiv": round(equiv, 2), "search_rollouts": round(total, 2),
            "share_of_training": round(total / train["rollouts"], 4) if train["rollouts"] else None,
            "by_mode": by_mode}


def debited_groups(search_rollouts: float, debited: int, group_size: int, tasks: int) -> int:
    """Groups a step draws fewer under `train.search_budget = "within"`: the search's rollouts not
    yet paid back (`search_rollouts` spent, `debited` paid), in whole groups, at most half of the
    step's `tasks` (the step still trains). What is left over is paid by later steps.

    >>> debited_groups(100.0, 0, 8, 64), debited_groups(1000.0, 0, 8, 64), debited_groups(7.0, 0, 8, 64)
    (12, 32, 0)
    """
    owed = math.ceil(search_rollouts) - debited
    return max(0, min(owed // group_size, tasks // 2))
