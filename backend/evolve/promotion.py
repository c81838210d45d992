"""Promotion: a judged candidate becomes the active harness (auto mode's decision, and the
operator's approval, end here).

A candidate is promoted only onto the version it was built on. One whose base
is no longer active is first rebased (`rebase`: its single change re-applied
onto the active version, in place) and judged again; the round does that as a
step of its own, between two calls of `decide`, so promotion never judges.
An `inconclusive` candidate is never auto-promoted.

A promotion records the validation evaluation it started from; the watch
(`watch.py`) judges it at the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from backend.commands import stale_base
from backend.harness.loader import Harness, sha

from . import interventions as iv
from . import schedule
from .edit import EditError, unified_diff
from .records import Decision, Scheduled, Status, Verdict


if TYPE_CHECKING:
    from .context import EvolveContext


def promote(ctx: EvolveContext, intervention_id: int, reason: str) -> int:
    """Make a passed (or approved) candidate the active harness; returns the new version id."""
    store = ctx.store
    row = store.intervention(intervention_id)
    if row is None or row.status not in ("passed", "approved"):
        raise iv.LifecycleError(f"intervention #{intervention_id} is {row.status if row else 'missing'}; "
                                "only passed candidates can be promoted")
    drop = stale_base({"parent_version": row.parent_version}, store.run()["harness_version"])
    if drop:  # promoting it as it stands would silently undo the newer promotions
        raise iv.LifecycleError(f"intervention #{intervention_id} is {drop}; rebase it first")
    harness = Harness.from_code(row.code)  # raises HarnessError before anything is written
    replaced = store.run()["harness_version"]
    base = store.latest_eval("validation")  # what the next validation evaluation judges the promotion against
    vid = store.promote_version(row, sha(row.code), ctx.step, replaced, base["id"] if base else None,
                                base["accuracy"] if base else None)
    iv.transition(store, intervention_id, "promoted", reason, version=vid, replaced=replaced, step=ctx.step)
    ctx.adopt(vid, harness)
    ctx.log("info", f"promoted intervention #{intervention_id} as harness v{vid} ({reason})")
    return vid


def decide(ctx: EvolveContext, verdicts: Sequence[Verdict], before: Decision | None = None) -> Decision:
    """Auto mode: promote this round's passed candidates in turn, best first, up to
    `evolve.promotions_per_round`. After the first, the rest are built on a version that is no
    longer active: the decision stops at the best of them (`Decision.rebase`) so the round can
    rebase it and judge it again, then goes on from `before` with that verdict. Every promotion
    is one change, judged on the harness it changes. Supervised mode decides nothing: passed
    candidates wait for the operator."""
    if before is None:
        if not ctx.auto_promote():
            return Decision()
        before = Decision(left=tuple(v.id for v in verdicts if v.status is Status.PASSED))
    promoted = before.promoted
    left = [i for i in before.left if all(v.id != i or v.status is Status.PASSED for v in verdicts)]
    while left and len(promoted) < ctx.cfg.evolve.promotions_per_round:
        row = next((r for r in iv.passed(ctx.store) if r.id in left
                    and (r.parent_version == ctx.harness_version or r.status == "passed")), None)
        if row is None:  # what is left failed its second judgement, or waits for the operator
            break
        if row.parent_version != ctx.harness_version:
            return Decision(promoted, tuple(left), rebase=row.id)
        promote(ctx, row.id, f"auto-promoted (score {row.score or 0:+.3f})")
        promoted, left = promoted + (row.id,), [i for i in left if i != row.id]
    return Decision(promoted, tuple(left))


def rebase(ctx: EvolveContext, intervention_id: int, why: str) -> list[Scheduled]:
    """Re-apply a candidate's single factor onto the active harness, in place (same id, its history
    says so); returns it to be judged again (`backtest.judge`). A change that does not apply
    cleanly (the active version changed the same name) fails with the reason: nothing to judge."""
    store = ctx.store
    row = iv.get(store, intervention_id)
    onto = ctx.harness_version
    try:
        code = iv.rebased_code(store, row, ctx.harness.code)
    except EditError as e:
        reason = f"rebase from v{row.parent_version} onto v{onto} failed: {e}"
        iv.transition(store, intervention_id, "failed", reason)
        ctx.log("warning", f"intervention #{intervention_id}: {reason}")
        return []
    store.rebase_intervention(intervention_id, code, onto,
                              unified_diff(ctx.harness.code, code, f"a/harness_v{onto}.py", "b/candidate.py"))
    iv.set_params(store, intervention_id, rebased=[*row.params.get("rebased", []),
                                                   {"from": row.parent_version, "onto": onto, "why": why}])
    ctx.log("info", f"intervention #{intervention_id} rebased from v{row.parent_version} onto v{onto} ({why})")
    return [schedule.scheduled(ctx, iv.get(store, intervention_id))]


def rebase_failure(ctx: EvolveContext, intervention_id: int) -> Verdict:
    """The verdict of a rebase that did not apply (`rebase` returned nothing to judge)."""
    row = iv.get(ctx.store, intervention_id)
    return Verdict(intervention_id, Status.FAILED, row.reason or "rebase failed")
