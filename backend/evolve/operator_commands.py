"""Operator commands: approve, veto, and the auto-promote switch.

`backend/dispatch.py` applies each command between steps (or between a round's
candidates) with an `EvolveContext`. A candidate built on a version that is no
longer active is promoted only after the same three steps a round takes for a
later promotion, each one call: rebase its change onto the active version
(`promotion.rebase`), judge it again (`backtest.judge`), then decide
(`promotion.promote`, or not). That happens when the operator confirms the
rebase, or when auto-promote is switched on. An `inconclusive` candidate is
promoted only when the approval says so explicitly (the approve command
carries `inconclusive: true`). Promotion itself never judges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import backtest, promotion
from . import interventions as iv
from .records import Status, Verdict


if TYPE_CHECKING:
    from .context import EvolveContext


def veto(ctx: EvolveContext, intervention_id: int, reason: str) -> str:
    iv.transition(ctx.store, intervention_id, "vetoed", reason, by="operator")
    return f"vetoed #{intervention_id}: {reason}"


def approve(ctx: EvolveContext, intervention_id: int, rebase: bool = False,
            inconclusive: bool = False) -> tuple[str, str]:
    """The operator's approval (already checked by `backend.commands.check`): promote the candidate;
    when `rebase` is set and it is built on another version, rebase -> judge -> decide.
    Returns (status, result) for the command's acknowledgement."""
    if not rebase or iv.get(ctx.store, intervention_id).parent_version == ctx.harness_version:
        return "applied", _approved(ctx, intervention_id)
    entries = promotion.rebase(ctx, intervention_id, "rebase confirmed by the operator")
    verdict = _only(ctx, intervention_id, backtest.judge(ctx, entries))
    note = f"rebased onto v{ctx.harness_version}, backtest {verdict.status.value}; "
    if verdict.status is Status.FAILED or (verdict.status is Status.INCONCLUSIVE and not inconclusive):
        return "rejected", f"#{intervention_id} {note}not promoted: {verdict.reason}"
    return "applied", note + _approved(ctx, intervention_id)


def set_auto_promote(ctx: EvolveContext, on: bool) -> str:
    """The operator's auto-promote setting (a column of `runs`, where the engine reads it); turned
    on, it promotes the best candidate already waiting. Returns the acknowledgement."""
    ctx.store.set_run(auto_promote=int(on))
    vid = _promote_best(ctx) if on else None
    return f"auto-promote {'on' if on else 'off'}" + (f"; promoted harness v{vid}" if vid else "")


def _approved(ctx: EvolveContext, intervention_id: int) -> str:
    """Decide: the operator's approval promotes the candidate. Returns the acknowledgement."""
    row = iv.get(ctx.store, intervention_id)
    why = "approved by the operator" + (" despite inconclusive evidence" if row.status == "inconclusive" else "")
    iv.transition(ctx.store, intervention_id, "approved", why)
    return f"promoted #{intervention_id} as harness v{promotion.promote(ctx, intervention_id, why)}"


def _promote_best(ctx: EvolveContext) -> int | None:
    """Promote the highest-scoring waiting candidate; one built on another version than the active
    one is first rebased onto it and judged again (rebase -> judge -> decide), and promoted only
    if it passes. Returns the new version, or None."""
    for row in iv.passed(ctx.store):
        if row.parent_version != ctx.harness_version:
            if row.status != "passed":
                continue  # approved by the operator for its own base: the operator rebases it
            verdict = _only(ctx, row.id, backtest.judge(ctx, promotion.rebase(ctx, row.id, "auto mode")))
            if verdict.status is not Status.PASSED:
                continue
            row = iv.get(ctx.store, row.id)
        return promotion.promote(ctx, row.id, f"auto-promoted (score {row.score or 0:+.3f})")
    return None


def _only(ctx: EvolveContext, intervention_id: int, verdicts: list[Verdict]) -> Verdict:
    """The one verdict of a rebased candidate's second judgement; a rebase that did not apply
    judged nothing, and its verdict is the rebase's failure."""
    return verdicts[0] if verdicts else promotion.rebase_failure(ctx, intervention_id)
