"""The gate: operator decisions, promotion, rollback, and learning skills.

Supervised mode holds passed candidates for the operator (approve / veto
commands, applied by `backend/dispatch.py`); auto-promote mode promotes the
best passed candidate of a round. A candidate is promoted only onto the
version it was built on: one whose base is no longer active is rebased (its
single change re-applied onto the active version, then backtested again) when
the operator confirms it, or in auto mode, and never promoted as it stands.
An `inconclusive` candidate is never auto-promoted; the operator may approve
it only explicitly (the approve command carries `inconclusive: true`).

Everything here reads the validation split only; the test split is reported,
never read (tests/test_gate_split.py scrambles it to prove that). A promotion
records the validation evaluation it started from; the next validation
evaluation judges it, paired problem by problem (`stats.paired_binary`):
a drop beyond `rollback_drop`, or a significant drop, rolls the harness back
to the version it replaced (and asks the loop to restore the policy checkpoint
from the promotion step); a gain whose 95% interval lies above zero turns the
intervention into a skill card that stores that interval and the sample size.
"""

from __future__ import annotations


from typing import TYPE_CHECKING

from backend.commands import stale_base
from backend.harness.loader import Harness, sha
from backend.types import JSON, Intervention

from . import interventions as iv
from . import skills as sk
from . import stats
from .diagnose import failure_table
from .backtest import backtest
from .context import Effects
from .edit import EditError, definition, unified_diff


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store


def _validation(store: Store) -> JSON:
    """The latest validation evaluation as {"id", "accuracy"} (empty when there is none)."""
    row = store.latest_eval("validation")
    return {"id": row["id"], "accuracy": row["accuracy"]} if row else {}


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
    base = _validation(store)  # what the next validation evaluation judges the promotion against
    vid = store.promote_version(row, sha(row.code), ctx.step, replaced, base.get("id"), base.get("accuracy"))
    iv.transition(store, intervention_id, "promoted", reason, version=vid, replaced=replaced, step=ctx.step)
    ctx.adopt(vid, harness)
    ctx.log("info", f"promoted intervention #{intervention_id} as harness v{vid} ({reason})")
    return vid


def promote_best(ctx: EvolveContext, ids: list[int] | None = None) -> int | None:
    """Auto mode: promote the highest-scoring passed candidate (of `ids` when given). One built on
    another version than the active one is rebased onto it and backtested again first."""
    for row in iv.passed(ctx.store):
        if ids is not None and row.id not in ids:
            continue
        if row.parent_version != ctx.harness_version:
            if row.status != "passed" or rebase_onto_active(ctx, row.id, "auto mode")["verdict"] != "passed":
                continue
            row = iv.get(ctx.store, row.id)
        return promote(ctx, row.id, f"auto-promoted (score {row.score or 0:+.3f})")
    return None


def promote_in_turn(ctx: EvolveContext, ids: list[int], most: int) -> list[int]:
    """Auto mode: up to `most` promotions from one round's passed candidates `ids`, best first.
    After each, the rest are built on a version that is no longer active, so `promote_best`
    re-applies the next one onto the new version and backtests it against that version before
    promoting it: every promotion is one change, judged on the harness it changes.
    Returns the promoted intervention ids in order (`ctx.harness_version` is the last one's)."""
    promoted: list[int] = []
    left = list(ids)
    while left and len(promoted) < most:
        vid = promote_best(ctx, left)
        if vid is None:
            break
        promoted.append(int((ctx.store.harness_version(vid) or {})["intervention_id"]))
        left = [i for i in left if i != promoted[-1]]
    return promoted


def rollback(ctx: EvolveContext, intervention_id: int, reason: str) -> int | None:
    """Return to the version a promotion replaced; record it. The effects carry the harness and
    the policy step to restore (the promotion's); returns that step."""
    store = ctx.store
    row = iv.get(store, intervention_id)
    back_to = row.replaced_version or row.parent_version
    back = store.harness_version(back_to) if back_to is not None else None
    if back_to is None or back is None:
        raise iv.LifecycleError(f"intervention #{intervention_id} has no harness version to roll back to")
    store.roll_back_version(row.child_version, back_to)
    iv.transition(store, intervention_id, "rolled_back", reason, version=back_to,
                  restore_policy_step=row.promoted_step)
    ctx.adopt(back_to, Harness.from_code(back["code"]))
    ctx.effects.restore_policy_step = row.promoted_step
    ctx.log("warning", f"rolled back intervention #{intervention_id} to harness v{back_to}: {reason}")
    return row.promoted_step


def learn_skill(ctx: EvolveContext, row: Intervention, gain: stats.Effect) -> str | None:
    """Turn a promoted intervention whose validation gain has its 95% interval above zero
    into a skill card (or credit the cards that shaped it). Returns the card's name, or None
    when the evidence does not show a gain.

    Validation before and after a promotion is read some steps apart, so on its own it credits
    the change with whatever the policy learned meanwhile (on 4 x H100 retiring a diagnostic
    that never fired, which changes no reward, became a skill). The change's own paired
    backtest must also show a gain on what it targets (`sk.backtest_shows_gain`)."""
    store = ctx.store
    bt = store.latest_backtest(row.id)
    if not sk.evidence_shows_gain(gain) or not sk.backtest_shows_gain(bt.ci_low if bt else None):
        return None
    p = row.params
    m = bt.metrics if bt else {}
    summary = {k: m.get(k) for k in ("agreement_old", "agreement_new", "dead_frac_old", "dead_frac_new", "revived")
               if k in m} or m.get("deltas", {})
    run_name = store.run().get("name") or str(store.path.parent)
    evidence = {"runs": [run_name], "deltas": [round(gain.effect, 4)], "backtests": [summary],
                "interventions": [row.id], "gains": [sk.gain_evidence(gain)]}
    table = failure_table(store, range(max(1, (row.promoted_step or 1) - ctx.cfg.evolve.window + 1),
                                       (row.promoted_step or 1) + 1))
    if row.skills:  # it came from skills: credit them instead of writing a near-copy
        sk.bump(store, row.skills, helped=1, evidence=evidence)
        ctx.effects.skills += row.skills
        ctx.log("info", f"skills {', '.join(row.skills)} helped again (validation {gain.text()})")
        return row.skills[0]
    name = p.get("name") or (row.names or [""])[0]
    op = p.get("op") if p.get("op") in sk.CHANGE_OPS else "set"  # an LLM's diff becomes "set this definition"
    change = {"op": op, "name": name, "source": "" if op == "remove" else definition(row.code, name) or "",
              "kind": row.kind, "template": p.get("template"), "title": row.title,
              "hypothesis": row.hypothesis, "expected": row.expected}
    card = {"name": p.get("template") or f"{row.kind}-{row.target or 'general'}",
            "domain": ctx.harness.domain,
            "trigger": {"labels": [row.target] if row.target else [],
                        "signature": ", ".join(f"{e['label']} {e['share']:.2f}" for e in table[:4]),
                        "domain": ctx.harness.domain},
            "change": change, "evidence": evidence, "uses": 0, "helped": 1}
    name, action = sk.upsert(store, card, source=f"run:{run_name}")
    if sk.shares_library(ctx):
        sk.save_global(dict(card, name=name))
    ctx.effects.skills.append(name)
    ctx.log("info", f"skill '{name}' {action} from intervention #{row.id} (validation {gain.text()})")
    return name


def validation_gain(store: Store, baseline_eval_id: int | None, current: JSON) -> stats.Effect | None:
    """Before vs after a promotion, paired over the validation problems both evaluations share."""
    before, after = store.eval_outcomes(baseline_eval_id), store.eval_outcomes(current.get("id"))
    a, b = stats.pair_up(before, after)
    return stats.paired_binary(a, b, metric="validation_accuracy") if a else None


def after_eval(ctx: EvolveContext, accuracy: float | None = None) -> Effects:
    """Judge promotions made since the last evaluation against the latest validation evaluation:
    at most one rollback, skills for the gains. Returns the effects (the harness and policy to
    restore after a rollback, the skills, the log lines).
    (`accuracy` is the loop's validation accuracy; the store's latest validation row is read for
    the paired comparison, and its accuracy is used when `accuracy` is not given.)"""
    store, cfg = ctx.store, ctx.cfg.evolve
    ctx.effects = Effects()
    current = _validation(store)
    if accuracy is None:
        accuracy = current.get("accuracy")
    if accuracy is None:
        return ctx.effects
    rolled_back = False
    for row in store.unjudged_promotions(ctx.step):
        if row.promoted_step == ctx.step:
            # evaluated before any training under the new harness: a fresher baseline, not a verdict
            store.set_baseline(row.id, current.get("id"), accuracy)
            continue
        base = row.baseline_acc
        delta = None if base is None else accuracy - base
        gain = validation_gain(store, row.baseline_eval_id, current)
        store.set_judged(row.id, ctx.step, current.get("id"), accuracy, delta,
                         sk.gain_evidence(gain) if gain is not None else None)
        active = store.run()["harness_version"] == row.child_version
        dropped = delta is not None and -delta > cfg.rollback_drop
        if (dropped or (gain is not None and gain.harmful)) and active and not rolled_back:
            why = f"validation accuracy fell {base:.3f} -> {accuracy:.3f}" if base is not None else "validation fell"
            why += f" (more than rollback_drop {cfg.rollback_drop})" if dropped or gain is None \
                else f" significantly ({gain.text()})"
            rollback(ctx, row.id, why)
            rolled_back = True
        elif gain is not None:
            learn_skill(ctx, iv.get(store, row.id), gain)
    return ctx.effects


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
        res = rebase_onto_active(ctx, intervention_id, "rebase confirmed by the operator")
        note = f"rebased onto v{ctx.harness_version}, backtest {res['verdict']}; "
        if res["verdict"] == "failed" or (res["verdict"] == "inconclusive" and not inconclusive):
            return "rejected", f"#{intervention_id} {note}not promoted: {res['reason']}"
        row = iv.get(store, intervention_id)
    why = "approved by the operator" + (" despite inconclusive evidence" if row.status == "inconclusive" else "")
    iv.transition(store, intervention_id, "approved", why)
    vid = promote(ctx, intervention_id, why)
    return "applied", f"{note}promoted #{intervention_id} as harness v{vid}"


def rebase_onto_active(ctx: EvolveContext, intervention_id: int, why: str) -> JSON:
    """Re-apply a candidate's single factor onto the active harness and backtest it again, in place
    (same id, its history says so). A change that does not apply cleanly (the active version changed
    the same name) fails with the reason. Returns the backtest result."""
    store = ctx.store
    row = iv.get(store, intervention_id)
    onto = ctx.harness_version
    try:
        code = iv.rebased_code(store, row, ctx.harness.code)
    except EditError as e:
        reason = f"rebase from v{row.parent_version} onto v{onto} failed: {e}"
        iv.transition(store, intervention_id, "failed", reason)
        ctx.log("warning", f"intervention #{intervention_id}: {reason}")
        return {"id": intervention_id, "verdict": "failed", "reason": reason, "score": 0.0}
    store.rebase_intervention(intervention_id, code, onto,
                              unified_diff(ctx.harness.code, code, f"a/harness_v{onto}.py", "b/candidate.py"))
    iv.set_params(store, intervention_id, rebased=[*row.params.get("rebased", []),
                                                   {"from": row.parent_version, "onto": onto, "why": why}])
    ctx.log("info", f"intervention #{intervention_id} rebased from v{row.parent_version} onto v{onto} ({why})")
    return backtest(ctx, [intervention_id])[0]
