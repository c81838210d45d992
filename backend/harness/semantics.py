"""One harness semantics: what applying a harness to a batch of rollouts means.

`apply_harness(harness, batch)` is the single function that training, replay
(backtests), probes and the TUI's preview all call. Rewards and labels come
from the harness code in the sandboxed worker; everything after that (the
weighted total, validity, filters, dead groups, advantages) is this module's
trusted arithmetic over the harness's validated constants:

1. reward = sum(weight x component) over REWARD_WEIGHTS (components from the worker);
2. labels = the diagnostics that fired (with evidence);
3. a group is **dead** when its rewards are equal within DEAD_TOL (GRPO learns
   nothing from it); its advantages are exactly 0;
4. FILTERS drop truncated rollouts, rollouts with a VALIDITY label, dead groups;
   a group left with fewer than two rollouts is dropped;
5. advantages of the rest follow ADVANTAGE (`group_std` with population or
   sample std, `group_mean`, `rank`).

A rollout is trained on exactly when `kept` and its advantage is non-zero.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .spec import HarnessSpec


if TYPE_CHECKING:
    from .client import HarnessWorker
    from .loader import Harness

DEAD_TOL = 1e-6
"""Rewards closer than this count as equal (one place: training, replay, metrics)."""


@dataclass
class RolloutIn:
    """What the harness is applied to: the documented view plus the group it belongs to."""

    group: tuple[Any, ...]
    view: dict[str, Any]
    """question, answer, prompt, completion, finish, completion_tokens, max_new_tokens, obs, turns,
    domain, meta, task_id (never the evaluator's verdict, the stored reward or labels)."""


@dataclass
class RolloutOut:
    reward: float
    components: dict[str, Any]
    errors: dict[str, Any]
    labels: list[tuple[str, str]]
    """[(label, evidence), ...]"""
    kept: bool = True
    advantage: float = 0.0

    @property
    def label_set(self) -> set[str]:
        return {lbl for lbl, _ in self.labels}

    @property
    def trained(self) -> bool:
        return is_trained(self.kept, self.advantage)


@dataclass
class BatchOut:
    rollouts: list[RolloutOut]
    dead: set[tuple[Any, ...]] = field(default_factory=set)
    """Group keys whose rewards tie."""
    groups: list[tuple[Any, ...]] = field(default_factory=list)
    """The group key of each rollout, in order."""

    @property
    def n_groups(self) -> int:
        return len(set(self.groups))

    @property
    def dead_frac(self) -> float:
        return len(self.dead) / self.n_groups if self.n_groups else 0.0


def is_trained(kept: bool, advantage: float) -> bool:
    """The rollouts GRPO learns from: kept by the filters, with a non-zero advantage."""
    return bool(kept) and advantage != 0.0


def is_dead(rewards: list[float]) -> bool:
    """All rewards equal within DEAD_TOL (a group of one is not dead: it has no peers)."""
    return len(rewards) > 1 and max(rewards) - min(rewards) < DEAD_TOL


def reward_threshold(weights: dict[str, float]) -> float:
    """A reward above half the best possible total counts as 'the harness says right' (agreement
    with the evaluator, in training metrics and in backtests alike)."""
    return 0.5 * sum(w for w in weights.values() if w > 0)


def advantages(rewards: list[float], rule: str, eps: float = 1e-6, std: str = "population") -> list[float]:
    """Group-relative advantages for one group; exactly 0 for a dead group.

    >>> advantages([1.0, 0.0], "group_std")
    [0.9999990000010001, -0.9999990000010001]
    >>> advantages([0.1] * 8, "group_std")
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    n = len(rewards)
    if n == 0 or is_dead(rewards):
        return [0.0] * n
    mean = sum(rewards) / n
    if rule == "group_mean":
        return [r - mean for r in rewards]
    if rule == "rank":
        return _rank_advantages(rewards)
    spread = statistics.stdev(rewards) if std == "sample" else statistics.pstdev(rewards)
    return [(r - mean) / (spread + eps) for r in rewards]


def _rank_advantages(rewards: list[float]) -> list[float]:
    n = len(rewards)
    order = sorted(range(n), key=lambda i: rewards[i])
    ranks = [0.0] * n
    for pos, i in enumerate(order):
        ranks[i] = pos
    by_value: dict[float, list[float]] = {}  # ties share the mean rank
    for i, r in enumerate(rewards):
        by_value.setdefault(r, []).append(ranks[i])
    ranks = [sum(by_value[r]) / len(by_value[r]) for r in rewards]
    mid = (n - 1) / 2
    return [(x - mid) / max(mid, 1) for x in ranks]


def weighted_total(components: dict[str, Any], weights: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(reward, extra errors): the weighted sum, 0 when it is not finite."""
    total = sum(weights[k] * components.get(k, 0.0) for k in weights)
    if not math.isfinite(total):
        return 0.0, {"_total": "weighted total is not finite"}
    return float(total), {}


def filter_and_advantage(groups: list[tuple[Any, ...]], outs: list[RolloutOut], finishes: list[str],
                         spec: HarnessSpec) -> set[tuple[Any, ...]]:
    """Steps 3-5 in place on `outs`; returns the dead group keys."""
    by_group: dict[tuple[Any, ...], list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    f, a = spec.filters, spec.advantage
    dead = set()
    for g, ix in by_group.items():
        if is_dead([outs[i].reward for i in ix]):
            dead.add(g)
        for i in ix:
            o = outs[i]
            o.kept = not ((f.get("drop_truncated") and finishes[i] == "length")
                          or (f.get("drop_invalid") and o.label_set & spec.validity)
                          or (f.get("drop_dead_groups") and g in dead))
            o.advantage = 0.0
        live = [i for i in ix if outs[i].kept]
        if len(live) < 2:
            for i in live:
                outs[i].kept = False
            continue
        advs = advantages([outs[i].reward for i in live], a["rule"], a["eps"], a.get("std", "population"))
        for i, v in zip(live, advs):
            outs[i].advantage = v
    return dead


def apply_harness(harness: Harness, batch: list[RolloutIn], worker: HarnessWorker | None = None,
                  limit_s: float | None = None) -> BatchOut:
    """Apply `harness` (a `backend.harness.loader.Harness`) to `batch` through the worker.

    Raises HarnessError when the harness fails as a whole and WorkerFailure when the
    worker does; a reward component that fails on one rollout scores 0 with an error."""
    from .client import shared_worker

    spec = harness.spec
    worker = worker or shared_worker()
    scores = worker.apply(harness.code, spec.weights, [r.view for r in batch], limit_s)
    outs = []
    for s in scores:
        reward, extra = weighted_total(s.components, spec.weights)
        outs.append(RolloutOut(reward, s.components, {**s.errors, **extra}, list(s.labels)))
    groups = [r.group for r in batch]
    dead = filter_and_advantage(groups, outs, [str(r.view.get("finish") or "") for r in batch], spec)
    return BatchOut(outs, dead, groups)


def view_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """The harness's view of a stored `rollouts` row (used by replay)."""
    import json

    task = json.loads(row.get("task_json") or "{}")
    obs = json.loads(row.get("obs_json") or "{}")
    return {"question": task.get("question", ""), "answer": task.get("answer"), "prompt": row.get("prompt", ""),
            "completion": row.get("completion") or "", "finish": row.get("finish", ""),
            "completion_tokens": row.get("completion_tokens") or 0,
            "max_new_tokens": obs.pop("_max_new_tokens", 0), "turns": list(obs.pop("_turns", ()) or ()),
            "obs": obs, "domain": row.get("domain", ""), "meta": task.get("meta") or {},
            "task_id": row.get("task_id", "")}


def batch_from_rows(rows: list[dict[str, Any]]) -> list[RolloutIn]:
    """Stored rows as a batch, grouped by (step, group_idx) as training grouped them."""
    return [RolloutIn((r.get("step"), r.get("group_idx")), view_from_row(r)) for r in rows]
