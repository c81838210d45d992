"""The gate: operator decisions, promotion, rollback, and learning skills.

Supervised mode holds passed candidates for the operator (approve / veto
commands); auto-promote mode promotes the best passed candidate of a round.
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

from backend.harness.loader import Harness, sha
from backend.store import loads
from backend.types import Intervention

from . import interventions as iv
from . import skills as sk
from . import stats
from .aggregate import failure_table
from .edit import definition


def _validation(store) -> dict:
    """The latest validation evaluation as {"id", "accuracy"} (empty when there is none)."""
    row = store.latest_eval("validation")
    return {"id": row["id"], "accuracy": row["accuracy"]} if row else {}


def promote(ctx, intervention_id: int, reason: str) -> int:
    """Make a passed (or approved) candidate the active harness; returns the new version id."""
    store = ctx.store
    row = store.intervention(intervention_id)
    if row is None or row.status not in ("passed", "approved"):
        raise iv.LifecycleError(f"intervention #{intervention_id} is {row.status if row else 'missing'}; "
                                "only passed candidates can be promoted")
    harness = Harness.from_code(row.code)  # raises HarnessError before anything is written
    replaced = store.run()["harness_version"]
    base = _validation(store)  # what the next validation evaluation judges the promotion against
    vid = store.promote_version(row, sha(row.code), ctx.step, replaced, base.get("id"), base.get("accuracy"))
    iv.transition(store, intervention_id, "promoted", reason, version=vid, replaced=replaced, step=ctx.step)
    ctx.harness_version, ctx.harness = vid, harness
    ctx.log("info", f"promoted intervention #{intervention_id} as harness v{vid} ({reason})")
    return vid


def promote_best(ctx, ids: list[int] | None = None) -> int | None:
    """Auto mode: promote the highest-scoring passed candidate (of `ids` when given)."""
    for row in iv.passed(ctx.store):
        if ids is None or row.id in ids:
            return promote(ctx, row.id, f"auto-promoted (score {row.score or 0:+.3f})")
    return None


def rollback(ctx, intervention_id: int, reason: str) -> dict:
    """Return to the version a promotion replaced; record it. Returns the loop's instructions."""
    store = ctx.store
    row = iv.get(store, intervention_id)
    back_to = row.replaced_version or row.parent_version
    store.roll_back_version(row.child_version, back_to)
    iv.transition(store, intervention_id, "rolled_back", reason, version=back_to,
                  restore_policy_step=row.promoted_step)
    back = store.harness_version(back_to)
    ctx.harness_version, ctx.harness = back_to, Harness.from_code(back["code"])
    ctx.log("warning", f"rolled back intervention #{intervention_id} to harness v{back_to}: {reason}")
    return {"rollback_to_harness": back_to, "restore_policy_step": row.promoted_step}


def learn_skill(ctx, row: Intervention, gain: stats.Effect) -> str | None:
    """Turn a promoted intervention whose validation gain has its 95% interval above zero
    into a skill card (or credit the cards that shaped it). Returns the card's name, or None
    when the evidence does not show a gain."""
    if not sk.evidence_shows_gain(gain):
        return None
    store = ctx.store
    p = row.params
    bt = store.latest_backtest(row.id)
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
    sk.save_global(dict(card, name=name))
    ctx.log("info", f"skill '{name}' {action} from intervention #{row.id} (validation {gain.text()})")
    return name


def validation_gain(store, baseline_eval_id: int | None, current: dict) -> stats.Effect | None:
    """Before vs after a promotion, paired over the validation problems both evaluations share."""
    before, after = store.eval_outcomes(baseline_eval_id), store.eval_outcomes(current.get("id"))
    a, b = stats.pair_up(before, after)
    return stats.paired_binary(a, b, metric="validation_accuracy") if a else None


def after_eval(ctx, accuracy: float | None = None) -> dict | None:
    """Judge promotions made since the last evaluation against the latest validation evaluation.
    (`accuracy` is the loop's validation accuracy; the store's latest validation row is read for
    the paired comparison, and its accuracy is used when `accuracy` is not given.)"""
    store, cfg = ctx.store, ctx.cfg.evolve
    current = _validation(store)
    if accuracy is None:
        accuracy = current.get("accuracy")
    if accuracy is None:
        return None
    out = None
    for row in store.unjudged_promotions(ctx.step):
        if row.promoted_step == ctx.step:
            # evaluated before any training under the new harness: a fresher baseline, not a verdict
            store.set_baseline(row.id, current.get("id"), accuracy)
            continue
        base = row.baseline_acc
        delta = None if base is None else accuracy - base
        gain = validation_gain(store, row.baseline_eval_id, current)
        store.set_judged(row.id, ctx.step, current.get("id"), accuracy, delta, gain and sk.gain_evidence(gain))
        active = store.run()["harness_version"] == row.child_version
        dropped = delta is not None and -delta > cfg.rollback_drop
        if (dropped or (gain is not None and gain.harmful)) and active and out is None:
            why = f"validation accuracy fell {base:.3f} -> {accuracy:.3f}" if base is not None else "validation fell"
            why += f" (more than rollback_drop {cfg.rollback_drop})" if dropped else f" significantly ({gain.text()})"
            out = rollback(ctx, row.id, why)
        elif gain is not None:
            learn_skill(ctx, iv.get(store, row.id), gain)
    return out


def apply_command(ctx, cmd: dict) -> tuple[str, str]:
    """Handle approve / veto / auto_promote from the commands table and acknowledge it.
    Other verbs are left to the loop: ('rejected', 'unknown verb'), not acknowledged."""
    verb = (cmd.get("verb") or "").strip().lower()
    if verb not in ("approve", "veto", "auto_promote"):
        return "rejected", "unknown verb"
    arg = loads(cmd.get("arg_json"), {}) or {}
    try:
        status, result = _apply(ctx, verb, arg)
    except Exception as e:  # a bad command is answered, never raised into the loop
        status, result = "rejected", f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
    if cmd.get("id") is not None:
        ctx.store.ack_command(cmd["id"], status, result)
    return status, result


def _intervention_id(arg: dict) -> int:
    raw = arg.get("id", arg.get("intervention_id", arg.get("arg")))
    try:
        return int(str(raw).lstrip("#"))
    except (TypeError, ValueError):
        raise ValueError(f"expected an intervention id, got {raw!r}") from None


def _apply(ctx, verb: str, arg: dict) -> tuple[str, str]:
    store = ctx.store
    if verb == "auto_promote":
        raw = arg.get("on", arg.get("value", arg.get("enabled", arg.get("arg"))))
        on = raw if isinstance(raw, bool) else str(raw).strip().lower() in ("on", "true", "1", "yes")
        store.set_run(auto_promote=int(on))
        vid = promote_best(ctx) if on else None
        return "applied", f"auto-promote {'on' if on else 'off'}" + (f"; promoted harness v{vid}" if vid else "")
    iid = _intervention_id(arg)
    row = store.get("interventions", iid)
    if row is None:
        return "rejected", f"no intervention #{iid}"
    if verb == "veto":
        reason = (arg.get("reason") or "").strip() or "vetoed by the operator"
        iv.transition(store, iid, "vetoed", reason, by=arg.get("by", "operator"))
        return "applied", f"vetoed #{iid}: {reason}"
    explicit = bool(arg.get("inconclusive"))
    if row["status"] == "inconclusive" and not explicit:
        return "rejected", (f"intervention #{iid} is inconclusive ({row['reason'] or 'no clear gain'}); approve it "
                            "explicitly (evotui approve RUN ID --inconclusive, or A in the TUI)")
    if row["status"] not in ("passed", "inconclusive"):
        return "rejected", f"intervention #{iid} is {row['status']}; only passed candidates can be approved"
    why = "approved by the operator" + (" despite inconclusive evidence" if row["status"] == "inconclusive" else "")
    iv.transition(store, iid, "approved", arg.get("reason") or why)
    vid = promote(ctx, iid, why)
    return "applied", f"promoted #{iid} as harness v{vid}"
