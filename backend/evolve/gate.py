"""Operator commands: approve, veto, and the auto-promote switch.

`backend/dispatch.py` applies each command between steps (or between a round's
candidates) with an `EvolveContext`. A candidate built on a version that is no
longer active is promoted only after its change is rebased onto the active
version and judged again (`promotion.rebase`, `backtest.judge`): when the
operator confirms the rebase, or when auto-promote is switched on. An
`inconclusive` candidate is promoted only when the approval says so
explicitly (the approve command carries `inconclusive: true`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import interventions as iv
from .backtest import judge
from .promotion import promote, rebase, rebase_failure
from .records import Status, Verdict


if TYPE_CHECKING:
    from .context import EvolveContext


def rebase_and_judge(ctx: EvolveContext, intervention_id: int, why: str) -> Verdict:
    """Rebase a candidate onto the active version and judge it again; its verdict."""
    again = judge(ctx, rebase(ctx, intervention_id, why))
    return again[0] if again else rebase_failure(ctx, intervention_id)


def promote_best(ctx: EvolveContext) -> int | None:
    """Promote the highest-scoring waiting candidate; one built on another version than the
    active one is rebased onto it and judged again first. Returns the new version, or None."""
    for row in iv.passed(ctx.store):
        if row.parent_version != ctx.harness_version:
            if row.status != "passed" or rebase_and_judge(ctx, row.id, "auto mode").status is not Status.PASSED:
                continue
            row = iv.get(ctx.store, row.id)
        return promote(ctx, row.id, f"auto-promoted (score {row.score or 0:+.3f})")
    return None


def set_auto_promote(ctx: EvolveContext, on: bool) -> str:
    """The operator's auto-promote setting (a column of `runs`, where the engine reads it); turned
    on, it promotes the best candidate already waiting. Returns the acknowledgement."""
    ctx.store.set_run(auto_promote=int(on))
    vid = promote_best(ctx) if on else None
    return f"auto-promote {'on' if on else 'off'}" + (f"; promoted harness v{vid}" if vid else "")


def veto(ctx: EvolveContext, intervention_id: int, reason: str) -> str:
    iv.transition(ctx.store, intervention_id, "vetoed", reason, by="operator")
    return f"vetoed #{intervention_id}: {reason}"


def approve(ctx: EvolveContext, intervention_id: int, rebase: bool = False,
            inconclusive: bool = False) -> tuple[str, str]:
    """The operator's approval (already checked by `backend.commands.check`): promote the candidate,
    after re-applying its change onto the active version when `rebase` is set and it is built on
    another. Returns (status, result) for the command's acknowledgement."""
    store = ctx.store
    row = iv.get(store, intervention_id)
    note = ""
    if rebase and row.parent_version != ctx.harness_version:
        res = rebase_and_judge(ctx, intervention_id, "rebase confirmed by the operator")
        note = f"rebased onto v{ctx.harness_version}, backtest {res.status.value}; "
        if res.status is Status.FAILED or (res.status is Status.INCONCLUSIVE and not inconclusive):
            return "rejected", f"#{intervention_id} {note}not promoted: {res.reason}"
        row = iv.get(store, intervention_id)
    why = "approved by the operator" + (" despite inconclusive evidence" if row.status == "inconclusive" else "")
    iv.transition(store, intervention_id, "approved", why)
    vid = promote(ctx, intervention_id, why)
    return "applied", f"{note}promoted #{intervention_id} as harness v{vid}"
