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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from backend.types import Group, GroupKey, Rollout

from .spec import HarnessSpec


if TYPE_CHECKING:
    from .client import HarnessWorker, Scores

class Applicable(Protocol):
    """What applying a harness reads of it: its code (for the worker) and its validated constants.
    `backend.harness.loader.Harness` is one; this module does not import the loader, which imports it."""

    @property
    def code(self) -> str: ...

    @property
    def spec(self) -> HarnessSpec: ...


DEAD_TOL = 1e-6
"""Rewards closer than this count as equal (one place: training, replay, metrics)."""


@dataclass
class RolloutOut:
    """What the harness made of one rollout: its reward, labels, and whether and how GRPO trains on it."""

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
    """A harness applied to a batch: one `RolloutOut` per rollout, in order, and the batch's groups."""

    rollouts: list[RolloutOut]
    by_group: list[Group] = field(default_factory=list)

    @property
    def dead(self) -> set[GroupKey]:
        """Keys of the groups whose rewards tie."""
        return {g.key for g in self.by_group if g.dead}

    @property
    def n_groups(self) -> int:
        return len(self.by_group)

    @property
    def dead_frac(self) -> float:
        return len(self.dead) / self.n_groups if self.n_groups else 0.0


def is_trained(kept: bool, advantage: float) -> bool:
    """The rollouts GRPO learns from: kept by the filters, with a non-zero advantage."""
    return bool(kept) and advantage != 0.0


def is_dead(rewards: list[float]) -> bool:
    """All rewards equal within DEAD_TOL (a group of one is not dead: it has no peers)."""
    return len(rewards) > 1 and max(rewards) - min(rewards) < DEAD_TOL


def group_batch(keys: Sequence[GroupKey], rewards: Sequence[float]) -> list[Group]:
    """The groups of a batch (rollout `i` has key `keys[i]` and reward `rewards[i]`), in order of
    first appearance: the one place a group is called dead.

    >>> [(g.key, g.members, g.dead) for g in group_batch([(0,), (1,), (0,)], [0.5, 1.0, 0.5])]
    [((0,), (0, 2), True), ((1,), (1,), False)]
    """
    members: dict[GroupKey, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    return [Group(key, tuple(ix), is_dead([rewards[i] for i in ix])) for key, ix in members.items()]


def stored_groups(rows: Sequence[Mapping[str, Any]], reward_key: str = "reward") -> list[Group]:
    """The groups of stored `rollouts` rows, keyed (step, group_idx) as training grouped them;
    `reward_key` names the column judged (a replay's summary may judge another)."""
    return group_batch([(r.get("step"), r.get("group_idx")) for r in rows],
                       [float(r.get(reward_key) or 0.0) for r in rows])


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


def filter_and_advantage(keys: Sequence[GroupKey], outs: list[RolloutOut], finishes: list[str],
                         spec: HarnessSpec) -> list[Group]:
    """Steps 3-5 in place on `outs` (rollout `i` is in group `keys[i]`); returns the batch's groups."""
    groups = group_batch(keys, [o.reward for o in outs])
    f, a = spec.filters, spec.advantage
    for g in groups:
        for i in g.members:
            o = outs[i]
            o.kept = not ((f.get("drop_truncated") and finishes[i] == "length")
                          or (f.get("drop_invalid") and o.label_set & spec.validity)
                          or (f.get("drop_dead_groups") and g.dead))
            o.advantage = 0.0
        live = [i for i in g.members if outs[i].kept]
        if len(live) < 2:
            for i in live:
                outs[i].kept = False
            continue
        advs = advantages([outs[i].reward for i in live], a["rule"], a["eps"], a.get("std", "population"))
        for i, v in zip(live, advs):
            outs[i].advantage = v
    return groups


def apply_harness(harness: Applicable, batch: Sequence[Rollout], worker: HarnessWorker | None = None,
                  limit_s: float | None = None, known: Sequence[Scores | None] | None = None) -> BatchOut:
    """Apply `harness` (a `backend.harness.loader.Harness`) to `batch` through the worker.

    Only plain data crosses into the worker (`Rollout.view()`) and back (components,
    errors, labels); the weighted total, filters, dead groups and advantages are
    computed here. Raises HarnessError when the harness fails as a whole and
    WorkerFailure when the worker does; a reward component that fails on one
    rollout scores 0 with an error.

    `known`: what the worker already said of some rollouts of the batch (`rollout.asking`, asked
    while the rest decoded), None where it has not; only the others are sent. The worker scores
    each rollout on its own, as it does the shares of a batch split over its children, so a
    rollout's scores do not depend on the request it came in."""
    from .client import shared_worker

    spec = harness.spec
    worker = worker or shared_worker()
    scores: list[Scores | None] = list(known) if known is not None else [None] * len(batch)
    todo = [i for i, s in enumerate(scores) if s is None]
    for i, fresh in zip(todo, worker.apply(harness.code, spec.weights, [batch[i].view() for i in todo], limit_s)):
        scores[i] = fresh
    outs = []
    for s in scores:
        assert s is not None  # each rollout answered, early or just now
        reward, extra = weighted_total(s.components, spec.weights)
        outs.append(RolloutOut(reward, s.components, {**s.errors, **extra}, list(s.labels)))
    groups = filter_and_advantage([r.group for r in batch], outs, [str(r.finish or "") for r in batch], spec)
    return BatchOut(outs, groups)


def rollout_from_row(row: Mapping[str, Any]) -> Rollout:
    """A stored `rollouts` row as the harness sees it, in its training group (step, group_idx)."""
    import json

    task = json.loads(row.get("task_json") or "{}")
    obs = json.loads(row.get("obs_json") or "{}")
    max_new_tokens = obs.pop("_max_new_tokens", 0)  # the engine's bookkeeping, not the domain's observations
    turns = list(obs.pop("_turns", ()) or ())
    return Rollout(group=(row.get("step"), row.get("group_idx")), question=task.get("question", ""),
                   answer=task.get("answer"), prompt=row.get("prompt", ""), completion=row.get("completion") or "",
                   finish=row.get("finish", ""), completion_tokens=row.get("completion_tokens") or 0,
                   max_new_tokens=max_new_tokens, obs=obs, turns=turns, domain=row.get("domain", ""),
                   meta=task.get("meta") or {}, task_id=row.get("task_id", ""))


def batch_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[Rollout]:
    """Stored rows as a batch, grouped by (step, group_idx) as training grouped them."""
    return [rollout_from_row(r) for r in rows]
