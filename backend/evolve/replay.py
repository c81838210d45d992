"""Replay: apply other harnesses to stored rollouts, exactly as training would.

Each harness (the incumbent and every candidate of a round) goes through
`backend.harness.semantics.apply_harness`, the same function the loop scores
a training batch with, so rewards, labels, filters, dead groups and
advantages come out as training would have made them. The harness code runs
only in the sandboxed harness worker, with a CPU limit per harness; a harness
that fails (does not load, crashes as a whole, runs over) fails alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from backend.harness.check import HarnessError
from backend.harness.client import WorkerFailure
from backend.harness.loader import Harness
from backend.harness.semantics import BatchOut, apply_harness, batch_from_rows
from backend.store.rollouts import split_labels
from backend.types import JSON


if TYPE_CHECKING:
    from backend.store import Store

HISTORY_GROUPS = 16
"""Groups from before the window replayed too, so a fix is not judged on recent rollouts alone."""
MAX_ROWS = 600


@dataclass
class Replayed:
    """One harness over the replayed rows: its output, or why it failed."""

    harness: Harness | None
    out: BatchOut | None
    error: str | None = None


def select_rows(store: Store, step: int, window: int, extra_ids: Iterable[int] = (),
                history_groups: int = HISTORY_GROUPS, max_rows: int = MAX_ROWS) -> list[JSON]:
    """Rows to replay: the recent window (at most `max_rows`), whole groups spread over older
    history, and `extra_ids` (rollouts earlier promotions fixed), without duplicates."""
    recent = store.recent_rollouts(step - window, step, max_rows)
    older = store.groups_through(step - window)
    if older and history_groups:
        stride = max(1, len(older) // history_groups)
        for g_step, g_idx in older[::stride][:history_groups]:  # evenly spread, deterministic
            recent += store.group_rollouts(g_step, g_idx)
    recent += store.rollouts_by_id(extra_ids)
    seen, out = set(), []
    for r in sorted(recent, key=lambda r: r["id"]):
        if r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


def replay_one(code: str, rows: list[JSON], timeout_s: float) -> Replayed:
    """Apply `code` to `rows` through the worker. Never raises."""
    try:
        harness = Harness.from_code(code)
    except HarnessError as e:
        return Replayed(None, None, f"does not load: {e}"[:300])
    if not rows:
        return Replayed(harness, BatchOut([]))
    try:
        return Replayed(harness, apply_harness(harness, batch_from_rows(rows), limit_s=timeout_s))
    except (HarnessError, WorkerFailure) as e:
        return Replayed(harness, None, str(e)[:300])


def replay(codes: list[str], rows: list[JSON], timeout_s: float) -> list[Replayed]:
    """Replay each harness over `rows`; one `Replayed` per code, in order."""
    return [replay_one(code, rows, timeout_s) for code in codes]


def mismatches(rows: list[JSON], code: str) -> list[str]:
    """Differences between what training stored for `rows` and a replay of `code` over them
    (reward, labels, advantage): empty when replay reproduces training exactly."""
    res = replay_one(code, rows, 60.0)
    if res.out is None:
        return [f"replay failed: {res.error}"]
    out = []
    for r, o in zip(rows, res.out.rollouts):
        stored_labels = split_labels(r.get("labels"))
        if r["reward"] != o.reward or stored_labels != o.label_set or \
                (r.get("advantage") is not None and r["advantage"] != o.advantage):
            out.append(f"rollout {r['id']}: stored ({r['reward']}, {sorted(stored_labels)}, {r.get('advantage')})"
                       f" != replayed ({o.reward}, {sorted(o.label_set)}, {o.advantage})")
    return out
