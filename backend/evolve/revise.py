"""Diagnostic revision: diagnostics are part of the harness and evolve too.

When a large share of failures carries no label, their signatures (the
evaluator's status, the shape of the final answer, the final line with numbers
masked, shared word 3-grams) are clustered, and a new `diagnose_<label>` is
written for the biggest cluster. Diagnostics that never fire, or that fire
mostly on rollouts the evaluator calls correct, are proposed for retirement.
Validity diagnostics are guards and are never retired here.

Both kinds of change are ordinary candidates: they go through the backtest
(coverage of unlabeled failures, false fires on correct rollouts) and the gate.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

from backend.types import JSON

from .edit import add_definition, remove_name
from .interventions import Candidate


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store

MIN_UNLABELED = 4
MIN_UNLABELED_SHARE = 0.25
"""Revise when at least this share of the window's failures is unexplained."""
RETIRE_MIN_ROLLOUTS = 48
DISAGREE_SHARE = 0.5
DISAGREE_MIN = 8


def _mask(text: str) -> str:
    return re.sub(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?", "N", " ".join((text or "").lower().split()))


def signature(row: JSON) -> JSON:
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


def clusters(rows: list[JSON]) -> list[tuple[tuple[Any, ...], list[JSON]]]:
    """Group rows by (verdict, answer shape, final line); biggest first."""
    out: dict[tuple[Any, ...], list[JSON]] = {}
    for r in rows:
        s = signature(r)
        out.setdefault((s["verdict"], s["shape"], s["final"]), []).append(r)
    return sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:30].strip("_")
    return s if s and not s[0].isdigit() else "x_" + s


def _distinctive_gram(members: list[JSON], contrast: list[JSON]) -> str | None:
    """A word 3-gram (no numbers) in most of the cluster and rare in correct rollouts."""
    counts = Counter(g for r in members for g in signature(r)["ngrams"] if "N" not in g.split())
    seen = Counter(g for r in contrast for g in signature(r)["ngrams"])
    for gram, c in counts.most_common(20):
        if c >= 0.6 * len(members) and seen[gram] <= 0.1 * max(len(contrast), 1):
            return str(gram)
    return None


def write_diagnostic(key: tuple[Any, ...], members: list[JSON],
                     contrast: Sequence[JSON] = ()) -> tuple[str, str, str]:
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


def unlabeled_rows(store: Store, steps: range) -> list[JSON]:
    return store.unlabeled_failures(steps[0], steps[-1])


def propose_new(ctx: EvolveContext, steps: range, parent_version: int, parent_code: str) -> Candidate | None:
    if not len(steps):
        return None
    rows = unlabeled_rows(ctx.store, steps)
    failures = ctx.store.count_failures(steps[0], steps[-1])
    if len(rows) < MIN_UNLABELED or len(rows) < MIN_UNLABELED_SHARE * failures:
        return None
    key, members = clusters(rows)[0]
    contrast = ctx.store.correct_completions(steps[0], steps[-1], limit=200)
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
