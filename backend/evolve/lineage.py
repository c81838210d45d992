"""Lineage: why a harness version looks the way it does, back to the root.

    >>> for s in lineage(store, 3):
    ...     print(s["version"], s["intervention"] and s["intervention"]["title"], s["decision"])

Each step carries the diagnosis that motivated the change (the round's
failure table), the hypothesis, the backtest verdict and the decision (who
promoted it and why, or why it was rolled back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from backend.store import loads
from backend.types import JSON


if TYPE_CHECKING:
    from backend.store import Store

TOP = 5
"""Failure-table rows a step keeps from the round that motivated it."""


class LineageStep(TypedDict):
    """One version of the chain: the version row, and (for a version an intervention made) that
    intervention, the round's diagnosis, its latest backtest and the decision, as reports show them."""

    version: int
    parent: int | None
    status: str
    created_at: Any
    sha: str
    note: str
    intervention: dict[str, object] | None
    diagnosis: dict[str, object] | None
    backtest: dict[str, object] | None
    decision: dict[str, object] | None


def _step(store: Store, v: JSON) -> LineageStep:
    out: LineageStep = {"version": v["id"], "parent": v["parent"], "status": v["status"], "created_at": v["created_at"],
           "sha": v["sha"], "note": v["note"], "intervention": None, "diagnosis": None, "backtest": None,
           "decision": None}
    iid = v.get("intervention_id")
    row = store.intervention(iid) if iid else None
    if row is None:
        return out
    out["intervention"] = {k: getattr(row, k) for k in ("id", "title", "kind", "target", "proposer", "hypothesis",
                                                        "expected", "status", "diff", "skills")}
    rnd = store.round(row.round_id) if row.round_id else None
    if rnd:
        out["diagnosis"] = {"round": rnd["id"], "step": rnd["step"],
                            "failure_table": loads(rnd["failure_table_json"], [])[:TOP],
                            "metrics": loads(rnd["metrics_json"], {})}
    bt = store.latest_backtest(row.id)
    if bt:
        out["backtest"] = {"mode": bt.mode, "verdict": bt.verdict, "reason": bt.reason, "n_rollouts": bt.n_rollouts,
                           "metrics": {k: val for k, val in bt.metrics.items() if not isinstance(val, (list, dict))}}
    promoted = next((h for h in reversed(row.history) if h.get("to") == "promoted"), None)
    out["decision"] = {"status": row.status, "reason": row.reason,
                       "promoted": promoted and promoted.get("reason"), "history": row.history}
    return out


def lineage(store: Store, harness_version: int) -> list[LineageStep]:
    """Steps from `harness_version` back to the root version, newest first."""
    out, seen = [], set()
    vid = harness_version
    while vid is not None and vid not in seen:
        seen.add(vid)
        v = store.harness_version(vid)
        if v is None:
            break
        out.append(_step(store, v))
        vid = v["parent"]
    return out
