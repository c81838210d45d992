"""Step 1 of a round: turn recent diagnoses into a failure table and drift metrics.

The failure table is what every proposer reads: one row per label with its
count, its share of the window's rollouts, its trend (share in the later half
of the window minus the earlier half), how often the evaluator still called
those rollouts correct (a label that fires on correct answers is a reward
blind spot or a bad diagnostic), and example rollout ids. Failures that no
diagnostic explains get a row of their own, `(unlabeled)`.

Group-level metrics (`dead_groups`) are added as pseudo-rows so templates can
trigger on them the same way as on labels.
"""

from __future__ import annotations

import statistics
from typing import Any, TYPE_CHECKING

from backend.harness.semantics import is_dead
from backend.types import JSON


if TYPE_CHECKING:
    from backend.store import Store

UNLABELED = "(unlabeled)"
DEAD = "dead_groups"
EXAMPLES = 5


def _window_rows(store: Store, steps: range) -> list[JSON]:
    if not len(steps):
        return []
    return store.window_rollouts(steps[0], steps[-1])


def _labels_by_rollout(store: Store, steps: range) -> dict[int, dict[str, int]]:
    """rollout id -> {label: validity flag} for the window."""
    out: dict[int, dict[str, int]] = {}
    if not len(steps):
        return out
    for d in store.window_diagnoses(steps[0], steps[-1]):
        out.setdefault(d["rollout_id"], {})[d["label"]] = int(d["validity"] or 0)
    return out


def dead_groups(rows: list[JSON], key: str = "reward") -> list[tuple[Any, ...]]:
    """(step, group_idx) of groups whose rewards all tie (GRPO learns nothing from them)."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        groups.setdefault((r["step"], r["group_idx"]), []).append(float(r[key] or 0.0))
    return [g for g, rs in groups.items() if is_dead(rs)]


def failure_table(store: Store, steps: range) -> list[JSON]:
    """Rows {label, count, share, trend, correct_share, validity, examples}, most frequent first.

    `share` is over all rollouts in the window; `trend` compares the later half
    of the window with the earlier half (positive: growing).
    """
    rows = _window_rows(store, steps)
    if not rows:
        return []
    labels = _labels_by_rollout(store, steps)
    mid = steps[0] + len(steps) / 2
    early = [r for r in rows if r["step"] < mid] or rows
    late = [r for r in rows if r["step"] >= mid] or rows
    table: dict[str, JSON] = {}

    def add(label: str, r: Any, validity: Any = 0) -> None:
        e = table.setdefault(label, {"label": label, "count": 0, "correct": 0, "validity": validity,
                                     "examples": [], "ids": set()})
        e["count"] += 1
        e["correct"] += int(r["correct"] or 0)
        e["ids"].add(r["id"])
        if len(e["examples"]) < EXAMPLES:
            e["examples"].append(r["id"])

    for r in rows:
        got = labels.get(r["id"], {})
        for label, validity in got.items():
            add(label, r, validity)
        if not r["correct"] and not [lbl for lbl in got if lbl != "diagnostic_error"]:
            add(UNLABELED, r)
    dead = set(dead_groups(rows))
    for r in rows:
        if (r["step"], r["group_idx"]) in dead:
            add(DEAD, r)
    out = []
    for e in table.values():
        ids = e.pop("ids")
        share_early = sum(r["id"] in ids for r in early) / len(early)
        share_late = sum(r["id"] in ids for r in late) / len(late)
        correct = e.pop("correct")
        out.append(dict(e, share=e["count"] / len(rows), trend=round(share_late - share_early, 4),
                        correct_share=correct / e["count"]))
    out.sort(key=lambda e: (-e["count"], e["label"]))
    return out


def _half_drift(values: list[float | None]) -> float | None:
    """Mean of the later half minus the mean of the earlier half (None when too short)."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    h = len(vals) // 2
    return statistics.fmean(vals[h:]) - statistics.fmean(vals[:h])


def auc(scores: list[float], positive: list[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties count half (Mann-Whitney).

    >>> auc([1.0, 0.0, 0.0], [True, False, False])
    1.0
    """
    pairs = sorted(zip(scores, positive))
    n_pos = sum(positive)
    n_neg = len(positive) - n_pos
    if not n_pos or not n_neg:
        return None
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        mid_rank = (i + j + 1) / 2  # 1-based midrank of the tie block
        rank_sum += mid_rank * sum(p for _, p in pairs[i:j])
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def round_metrics(store: Store, steps: range) -> JSON:
    """Window metrics: dead-group fraction, reward-vs-evaluator divergence, drifts."""
    rows = _window_rows(store, steps)
    srows = store.window_steps(steps[0], steps[-1]) if len(steps) else []
    groups = {(r["step"], r["group_idx"]) for r in rows}
    a = auc([float(r["reward"] or 0) for r in rows], [bool(r["correct"]) for r in rows]) if rows else None
    return {
        "steps": [steps[0], steps[-1]] if len(steps) else [],
        "n_rollouts": len(rows),
        "n_groups": len(groups),
        "dead_group_frac": len(dead_groups(rows)) / len(groups) if groups else None,
        "accuracy": statistics.fmean([r["correct"] or 0 for r in rows]) if rows else None,
        "reward_auc": a,
        # 0 = the reward orders rollouts exactly as the evaluator does, 0.5 = blind to it
        "divergence": None if a is None else round(1 - a, 4),
        "agreement": _mean([s.get("agreement") for s in srows]),
        "length_drift": _half_drift([s.get("mean_completion_tokens") for s in srows]),
        "entropy_drift": _half_drift([s.get("entropy") for s in srows]),
        "mean_completion_tokens": _mean([s.get("mean_completion_tokens") for s in srows]),
        "entropy": _mean([s.get("entropy") for s in srows]),
    }


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None
