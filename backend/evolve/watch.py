"""The watch after a promotion: rollback and skills, judged on the validation split.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backend.harness.loader import Harness
from backend.types import Intervention

from . import interventions as iv
from . import skills as sk
from . import stats
from .context import Effects
from .diagnose import failure_table
from .edit import definition


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store


@dataclass(frozen=True)
class Validation:
    """A validation evaluation: its row id and accuracy."""

    id: int | None
    accuracy: float | None


def latest_validation(store: Store) -> Validation:
    """The latest validation evaluation (both None when there is none)."""
    row = store.latest_eval("validation")
    return Validation(row["id"], row["accuracy"]) if row else Validation(None, None)


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
    the change with whatever the policy learned meanwhile (a change to no reward at all, such as
    retiring a diagnostic that never fired, would become a skill). The change's own paired
    backtest must also show a gain on what it targets (`sk.backtest_shows_gain`)."""
    store = ctx.store
    bt = store.latest_backtest(row.id)
    if not sk.evidence_shows_gain(gain) or not sk.backtest_shows_gain(bt.ci_low if bt else None):
        return None
    p = row.params
    m = bt.metrics if bt else {}
    kept = ("agreement_old", "agreement_new", "dead_frac_old", "dead_frac_new", "revived")
    summary: dict[str, Any] = {k: m.get(k) for k in kept if k in m} or m.get("deltas", {})
    run_name = store.run().get("name") or str(store.path.parent)
    evidence: sk.SkillEvidence = {"runs": [run_name], "deltas": [round(gain.effect, 4)], "backtests": [summary],
                                  "interventions": [row.id], "gains": [sk.gain_evidence(gain)]}
    table = failure_table(store, range(max(1, (row.promoted_step or 1) - ctx.cfg.evolve.window + 1),
                                       (row.promoted_step or 1) + 1))
    if row.skills:  # it came from skills: credit them instead of writing a near-copy
        sk.bump(store, row.skills, helped=1, evidence=evidence)
        ctx.effects.skills += row.skills
        ctx.log("info", f"skills {', '.join(row.skills)} helped again (validation {gain.text()})")
        return row.skills[0]
    name = p.get("name") or (row.names or [""])[0]
    op = str(p.get("op")) if p.get("op") in sk.CHANGE_OPS else "set"  # an LLM's diff becomes "set this definition"
    change: sk.SkillChange = {
        "op": op, "name": name, "source": "" if op == "remove" else definition(row.code, name) or "",
        "kind": row.kind, "template": p.get("template"), "title": row.title,
        "hypothesis": row.hypothesis, "expected": row.expected}
    card: sk.SkillCard = {
        "name": p.get("template") or f"{row.kind}-{row.target or 'general'}", "domain": ctx.harness.domain,
        "trigger": {"labels": [row.target] if row.target else [],
                    "signature": ", ".join(f"{e['label']} {e['share']:.2f}" for e in table[:4]),
                    "domain": ctx.harness.domain},
        "change": change, "evidence": evidence, "uses": 0, "helped": 1}
    name, action = sk.upsert(store, card, source=f"run:{run_name}")
    if sk.shares_library(ctx):
        sk.save_global({**card, "name": name})
    ctx.effects.skills.append(name)
    ctx.log("info", f"skill '{name}' {action} from intervention #{row.id} (validation {gain.text()})")
    return name


def validation_gain(store: Store, baseline_eval_id: int | None, current: Validation) -> stats.Effect | None:
    """Before vs after a promotion, paired over the validation problems both evaluations share."""
    before, after = store.eval_outcomes(baseline_eval_id), store.eval_outcomes(current.id)
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
    current = latest_validation(store)
    if accuracy is None:
        accuracy = current.accuracy
    if accuracy is None:
        return ctx.effects
    rolled_back = False
    for row in store.unjudged_promotions(ctx.step):
        if row.promoted_step == ctx.step:
            # evaluated before any training under the new harness: a fresher baseline, not a verdict
            store.set_baseline(row.id, current.id, accuracy)
            continue
        base = row.baseline_acc
        delta = None if base is None else accuracy - base
        gain = validation_gain(store, row.baseline_eval_id, current)
        store.set_judged(row.id, ctx.step, current.id, accuracy, delta,
                         dict(sk.gain_evidence(gain)) if gain is not None else None)
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


