"""Steps 1 and 2 of a round: diagnosis of the recent window, and revision of the diagnostics.

**The failure table** is what every proposer reads: one row per label with its
count, its share of the window's rollouts, its trend (share in the later half
of the window minus the earlier half), how often the evaluator still called
those rollouts correct (a label that fires on correct answers is a reward
blind spot or a bad diagnostic), and example rollout ids. Failures that no
diagnostic explains get a row of their own, `(unlabeled)`. Group-level metrics
(`dead_groups`) are added as pseudo-rows so templates can trigger on them the
same way as on labels. `round_metrics` adds the window's drift metrics.

**Diagnostic revision**: diagnostics are part of the harness and evolve too.
When a large share of failures carries no label, their signatures (the
evaluator's status, the shape of the final answer, the final line with numbers
masked, shared word 3-grams) are clustered, and a new `diagnose_<label>` is
written for the biggest cluster (`propose_new`). Diagnostics that never fire,
or that fire mostly on rollouts the evaluator calls correct, are proposed for
retirement (`propose_retire`). Validity diagnostics are guards and are never
retired here. Both kinds of change are ordinary candidates: they go through the
backtest (coverage of unlabeled failures, false fires on correct rollouts) and
the gate.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from typing import Sequence, TYPE_CHECKING, TypedDict

from backend.harness.semantics import stored_groups
from backend.types import JSON, GroupKey

from .edit import add_definition, remove_name
from .failures import FailureRow, RoundMetrics
from .interventions import Candidate
from .rows import RolloutRow, rollout_rows


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store

UNLABELED = "(unlabeled)"
DEAD = "dead_groups"
EXAMPLES = 5


def _window_rows(store: Store, steps: range) -> list[RolloutRow]:
    if not len(steps):
        return []
    return rollout_rows(store.window_rollouts(steps[0], steps[-1]))


def _labels_by_rollout(store: Store, steps: range) -> dict[int, dict[str, int]]:
    """rollout id -> {label: validity flag} for the window."""
    out: dict[int, dict[str, int]] = {}
    if not len(steps):
        return out
    for d in store.window_diagnoses(steps[0], steps[-1]):
        out.setdefault(d["rollout_id"], {})[d["label"]] = int(d["validity"] or 0)
    return out


def dead_groups(rows: list[RolloutRow], key: str = "reward") -> list[GroupKey]:
    """(step, group_idx) of groups whose rewards all tie (GRPO learns nothing from them)."""
    return [g.key for g in stored_groups(rows, key) if g.dead]


def failure_table(store: Store, steps: range) -> list[FailureRow]:
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

    def add(label: str, r: RolloutRow, validity: int = 0) -> None:
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
        out.append(FailureRow(label=e["label"], count=e["count"], validity=e["validity"], examples=e["examples"],
                              share=e["count"] / len(rows), trend=round(share_late - share_early, 4),
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


def round_metrics(store: Store, steps: range) -> RoundMetrics:
    """Window metrics: dead-group fraction, reward-vs-evaluator divergence, drifts."""
    rows = _window_rows(store, steps)
    srows = store.window_steps(steps[0], steps[-1]) if len(steps) else []
    groups = {(r["step"], r["group_idx"]) for r in rows}
    a = auc([float(r["reward"] or 0) for r in rows], [bool(r["correct"]) for r in rows]) if rows else None
    return RoundMetrics({
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
    })


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


# ---------------------------------------------------------------- diagnostic revision

MIN_UNLABELED = 4
MIN_UNLABELED_SHARE = 0.25
"""Revise when at least this share of the window's failures is unexplained."""
RETIRE_MIN_ROLLOUTS = 48
DISAGREE_SHARE = 0.5
DISAGREE_MIN = 8


def _mask(text: str) -> str:
    return re.sub(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?", "N", " ".join((text or "").lower().split()))


class Signature(TypedDict):
    """The features unlabeled failures are clustered on (`signature`)."""

    verdict: str
    """The evaluator's status."""
    shape: str
    """The final number's shape: none, fraction, decimal, negative or integer."""
    final: str
    """The final line's first four words, numbers masked as N."""
    ngrams: set[str]
    """Word 3-grams of the completion, numbers masked."""


ClusterKey = tuple[str, str, str]
"""A cluster of failures: (verdict, answer shape, final line)."""


def signature(row: RolloutRow) -> Signature:
    """The features unlabeled failures are clustered on."""
    text = row.get("completion") or ""
    nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?", text)
    last = nums[-1] if nums else ""
    shape = "none" if not last else "fraction" if "/" in last else "decimal" if "." in last \
        else "negative" if last.startswith("-") else "integer"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    final = " ".join(_mask(lines[-1]).split()[:4]) if lines else ""
    words = _mask(text).split()
    return {"verdict": row.get("verdict") or "", "shape": shape, "final": final,
            "ngrams": {" ".join(words[i:i + 3]) for i in range(len(words) - 2)}}


def clusters(rows: list[RolloutRow]) -> list[tuple[ClusterKey, list[RolloutRow]]]:
    """Group rows by (verdict, answer shape, final line); biggest first."""
    out: dict[ClusterKey, list[RolloutRow]] = {}
    for r in rows:
        s = signature(r)
        out.setdefault((s["verdict"], s["shape"], s["final"]), []).append(r)
    return sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:30].strip("_")
    return s if s and not s[0].isdigit() else "x_" + s


def _distinctive_gram(members: list[RolloutRow], contrast: list[RolloutRow]) -> str | None:
    """A word 3-gram (no numbers) in most of the cluster and rare in correct rollouts."""
    counts = Counter(g for r in members for g in signature(r)["ngrams"] if "N" not in g.split())
    seen = Counter(g for r in contrast for g in signature(r)["ngrams"])
    for gram, c in counts.most_common(20):
        if c >= 0.6 * len(members) and seen[gram] <= 0.1 * max(len(contrast), 1):
            return str(gram)
    return None


def write_diagnostic(key: ClusterKey, members: list[RolloutRow],
                     contrast: Sequence[RolloutRow] = ()) -> tuple[str, str, str]:
    """(label, source, signature text) of a diagnostic that matches the cluster.
    `contrast` (correct rollouts) keeps phrase-based diagnostics from firing on successes."""
    verdict, shape, final = key
    head = f"    # proposed from {len(members)} unlabeled failures ({verdict or 'failed'}, answer shape {shape})\n"
    if shape == "none":
        return "no_number", ("def diagnose_no_number(r):\n" + head +
                             "    if r.completion.strip() and not numbers(r.completion):\n"
                             "        return \"no number anywhere; ends with: \" + tail(r.completion, 60)\n"), \
            "no number in the completion"
    gram = _distinctive_gram(members, list(contrast))
    if gram:
        label = "says_" + _slug(gram)
        return label, (f"def diagnose_{label}(r):\n" + head +
                       f"    if {json.dumps(gram)} in \" \".join(r.completion.lower().split()):\n"
                       f"        return {json.dumps('says ' + repr(gram))}\n"), f"says '{gram}'"
    return "wrong_final_number", ("def diagnose_wrong_final_number(r):\n" + head +
                                  "    pred = last_number(r.completion)\n"
                                  "    if pred is not None and not same_answer(pred, r.answer):\n"
                                  "        return \"final number \" + pred + \" is wrong\"\n"), \
        f"a wrong final number (final line '{final}')"


def unlabeled_rows(store: Store, steps: range) -> list[RolloutRow]:
    """Rollouts of the window the evaluator calls wrong that no diagnostic labelled, oldest first."""
    return rollout_rows(store.unlabeled_failures(steps[0], steps[-1]))


def propose_new(ctx: EvolveContext, steps: range, parent_version: int, parent_code: str) -> Candidate | None:
    if not len(steps):
        return None
    rows = unlabeled_rows(ctx.store, steps)
    failures = ctx.store.count_failures(steps[0], steps[-1])
    if len(rows) < MIN_UNLABELED or len(rows) < MIN_UNLABELED_SHARE * failures:
        return None
    key, members = clusters(rows)[0]
    contrast = rollout_rows(ctx.store.correct_completions(steps[0], steps[-1], limit=200))
    label, source, sig = write_diagnostic(key, members, contrast)
    existing = set(ctx.harness.diagnostics)
    if label in existing:
        return None
    return Candidate(
        title=f"New diagnostic '{label}'", code=add_definition(parent_code, source), parent_version=parent_version,
        parent_code=parent_code, proposer="revision", kind="diagnostic", target="(unlabeled)",
        hypothesis=f"{len(rows)} of {failures} failures carry no label; {len(members)} share one signature: {sig}.",
        expected="Those failures get a name the proposers can act on; no fires on correct rollouts.",
        params={"op": "add", "name": f"diagnose_{label}", "cluster": list(key), "cluster_size": len(members),
                "examples": [r["id"] for r in members[:8]]})


def fire_stats(store: Store, since_step: int, labels: list[str]) -> tuple[int, dict[str, tuple[int, float]]]:
    """(rollouts since `since_step`, {label: (fires, share of fires the evaluator calls correct)})."""
    return store.count_rollouts_after(since_step), {label: store.label_fires(since_step, label) for label in labels}


def propose_retire(ctx: EvolveContext, parent_version: int, parent_code: str) -> Candidate | None:
    """At most one retirement per round: a disagreeing diagnostic first, else a silent one."""
    guards = ctx.harness.validity
    labels = sorted(lbl for lbl in ctx.harness.diagnostics if lbl not in guards)
    n, stats = fire_stats(ctx.store, ctx.step - 4 * ctx.cfg.evolve.window, labels)
    disagree = [(lbl, s) for lbl, s in stats.items() if s[0] >= DISAGREE_MIN and s[1] >= DISAGREE_SHARE]
    silent = [(lbl, s) for lbl, s in stats.items() if s[0] == 0 and n >= RETIRE_MIN_ROLLOUTS]
    if disagree:
        label, (fires, c) = max(disagree, key=lambda t: t[1][1])
        why = f"it fired {fires} times, {c:.0%} of them on rollouts the evaluator calls correct"
    elif silent:
        label, (fires, c) = silent[0]
        why = f"it never fired in the last {n} rollouts"
    else:
        return None
    name = f"diagnose_{label}"
    return Candidate(
        title=f"Retire diagnostic '{label}'", code=remove_name(parent_code, name), parent_version=parent_version,
        parent_code=parent_code, proposer="revision", kind="diagnostic", target=label,
        hypothesis=f"'{label}' does not explain failures: {why}.",
        expected="A shorter failure table with the same information.", params={"op": "remove", "name": name})
