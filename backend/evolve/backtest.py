"""Backtest proposed interventions before anything trains on them.

Changes that replay can judge (rewards, extraction helpers, filters,
diagnostics) are replayed over stored rollouts next to the
incumbent (`replay.py`: replay, adversarial copies, `judge`). Changes that only show in fresh
generations (the prompt) get a short probe: the policy handle's
`generate(harness, n_tasks)` (`context.Policy`) makes a few groups with the
current policy under the candidate and under the incumbent, and the two are
compared; changes a probe cannot judge (curriculum, sampling, token budget, the
advantage rule) get a paired trial through the same handle (`Policy.trial`).

The schedule says what judges each candidate (`schedule.evidence`: replay,
probe, or trial where the run may run one) and whether it is a second look,
which spends half the error rate. Every judgement is a `backtests` row (mode,
metrics_json, verdict, reason), moves its intervention from backtesting to
passed, inconclusive or failed, and comes back as a `records.Verdict`.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Mapping, Sequence, TYPE_CHECKING, TypedDict

from backend.harness.loader import Harness, HarnessError
from backend.harness.semantics import reward_threshold, stored_groups
from backend.store.rollouts import split_labels
from backend.types import Intervention, JSON, TrialArm

from . import interventions as iv
from . import schedule, space
from .interventions import Evidence
from .records import Blocked, Scheduled, Status, Verdict
from .replay import BLOCK_MIN, BLOCK_SHARE, MAX_ROWS, Judged, adversarial_check, adversarial_copies, replay
from .replay import judge as judge_replay, select_rows
from .rows import RolloutRow
from .stats import ALPHA, Decision, decide, pair_up, paired_binary, paired_bootstrap, per_unit, replay_rows


if TYPE_CHECKING:
    from .context import EvolveContext
    from backend.store import Store


def fixed_ids(store: Store) -> set[int]:
    """Rollouts that the promoted (and not rolled back) interventions fixed."""
    out: set[int] = set()
    for bt in store.promoted_passed_backtests():
        out.update(bt.metrics.get("fixed_ids", []))
    return out


def _record(store: Store, iid: int, mode: str, n: int, verdict: str, reason: str, metrics: Mapping[str, Any],
            score: float, t0: float) -> Verdict:
    dec = metrics.get("decision") or {}
    stats = {k: dec.get(k) for k in ("metric", "effect", "ci_low", "ci_high", "p_value", "n")} if dec else {}
    if dec:
        stats["underpowered"] = int(bool(dec.get("underpowered")))
    if "same_update" in metrics:
        stats["same_update"] = int(bool(metrics["same_update"]))
    bid = store.add_backtest(iid, mode=mode, n_rollouts=n, metrics=dict(metrics), verdict=verdict, reason=reason,
                             ms=(time.perf_counter() - t0) * 1000, stats=stats, score=score)
    iv.transition(store, iid, verdict, reason, backtest_id=bid)
    return Verdict(iid, Status(verdict), reason, score, bid, mode)


def judge(ctx: EvolveContext, entries: Sequence[Scheduled], pause: bool = False) -> list[Verdict]:
    """Judge the scheduled `proposed` (or rebased) interventions; one verdict each. `pause`: a
    round's candidates, judged one at a time in order, with a pause or a stop honoured before
    each (`ctx.checkpoint`); otherwise the replays share one replay of the incumbent.
    Never raises for a bad candidate: it fails with the reason."""
    if pause:
        out: list[Verdict] = []
        for k, e in enumerate(entries, 1):
            ctx.checkpoint(f"round at step {ctx.step}: backtesting {k}/{len(entries)}")
            row = iv.transition(ctx.store, e.id, "backtesting", "backtest started")
            out += _replay_all(ctx, [(row, e)]) if e.evidence is Evidence.REPLAY else [_probe_one(ctx, row, e)]
        return out
    todo = [(iv.transition(ctx.store, e.id, "backtesting", "backtest started"), e) for e in entries]
    return (_replay_all(ctx, [(r, e) for r, e in todo if e.evidence is Evidence.REPLAY])
            + [_probe_one(ctx, r, e) for r, e in todo if e.evidence is not Evidence.REPLAY])


def backtest(ctx: EvolveContext, iids: list[int]) -> list[Verdict]:
    """`judge` for interventions given by id, each judged as the schedule recorded it."""
    return judge(ctx, [schedule.scheduled(ctx, iv.get(ctx.store, i)) for i in iids])


def _replay_all(ctx: EvolveContext, todo: list[tuple[Intervention, Scheduled]]) -> list[Verdict]:
    if not todo:
        return []
    store, cfg = ctx.store, ctx.cfg.evolve
    t0 = time.perf_counter()
    fixed = fixed_ids(store)
    rows = replay_window(ctx, sorted(fixed))
    if not rows:
        return [_record(store, r.id, "replay", 0, "failed", "no stored rollouts to replay", {}, 0.0, t0)
                for r, _ in todo]
    results = replay([ctx.harness.code] + [r.code for r, _ in todo], rows, cfg.backtest_timeout_s)
    fakes, fake_kinds = adversarial_copies(rows)
    rewarders = [r for r, _ in todo if r.kind == "reward"]
    attacked = dict(zip([r.id for r in rewarders], replay([r.code for r in rewarders], fakes,
                                                             cfg.backtest_timeout_s))) if fakes and rewarders else {}
    base_fake = replay([ctx.harness.code], fakes, cfg.backtest_timeout_s)[0] if attacked else None
    out = []
    for (row, entry), res in zip(todo, results[1:]):
        # a second look at an inconclusive candidate spends half the error rate: its two looks
        # (alpha, then alpha/2) keep a false pass under 1.5 alpha (Bonferroni)
        looked = entry.look_of
        try:
            j = judge_replay(row.kind, row.names, rows, results[0], res, fixed, cfg.min_gain, cfg.min_effect,
                             alpha=ALPHA / 2 if looked else ALPHA, min_trained=cfg.min_trained_groups)
            if j.status is Status.INCONCLUSIVE and j.metrics.get("same_update"):
                j.reason += "; training's update is unchanged on these rollouts (the same rows, the same advantages)"
            if looked:
                j.reason = f"second look at #{looked} over {len(rows)} rollouts (alpha {ALPHA / 2}): {j.reason}"
            if j.status is not Status.FAILED and row.id in attacked:
                verdict, j.reason, j.metrics = _adversarial(base_fake, attacked[row.id], fake_kinds,
                                                            (j.status.value, j.reason, j.metrics))
                j.status = Status(verdict)
                j.score = j.score if j.status is not Status.FAILED else 0.0
        except Exception as e:  # odd replay output (the candidate's constants) fails its candidate only
            j = Judged(Status.FAILED, f"judging the replay failed: {type(e).__name__}: {e}"[:300])
        j.metrics["incumbent_version"] = ctx.harness_version
        out.append(_record(store, row.id, "replay", len(rows), j.status.value, j.reason, j.metrics, j.score, t0))
    return out


def replay_window(ctx: EvolveContext, fixed: list[int]) -> list[RolloutRow]:
    """The stored rollouts a round replays: the last `evolve.window` steps, widened toward
    `evolve.replay_max_rows` when the power calculation (`stats.replay_rows`, at the window's
    accuracy) asks for more rows than the window holds."""
    cfg, store = ctx.cfg.evolve, ctx.store
    rows = select_rows(store, ctx.step, cfg.window, fixed, max_rows=min(MAX_ROWS, cfg.replay_max_rows))
    if not rows or cfg.replay_max_rows <= len(rows):
        return rows
    base = statistics.fmean(bool(r["correct"]) for r in rows)
    want = min(cfg.replay_max_rows, replay_rows(cfg.min_effect, cfg.min_gain, ctx.cfg.train.group_size, base))
    per_step = max(1, math.ceil(len(rows) / max(1, min(cfg.window, ctx.step))))  # as stored: redraws replace groups
    if want <= len(rows):
        return rows
    return select_rows(store, ctx.step, max(cfg.window, math.ceil(want / per_step)), fixed, max_rows=want)


def _adversarial(base: Any, cand: Any, kinds: list[str], judged: tuple[str, str, Any]) -> tuple[str, str, Any]:
    """Block a reward that pays perturbed wrong copies more than the incumbent does: (verdict,
    reason, metrics) from the `judged` ones, with the per-kind figures in the metrics."""
    verdict, reason, metrics = judged
    if base is None or base.error or cand.error:
        why = (cand.error or (base.error if base else "")) or "no adversarial replay"
        return "failed", f"adversarial replay failed: {why}"[:300], metrics
    weights = {k: max(cand.harness.weights.get(k, 0.0), base.harness.weights.get(k, 0.0))
               for k in set(cand.harness.weights) | set(base.harness.weights)}
    kind, per = adversarial_check([o.reward for o in base.out.rollouts], [o.reward for o in cand.out.rollouts],
                                  kinds, weights)
    metrics["adversarial"] = per
    if kind:
        e = per[kind]
        return "failed", (f"blocked by adversarial replay: pays '{kind}' copies of wrong rollouts (high "
                          f"{e['high_old']:.0%} -> {e['high_new']:.0%}, mean reward {e['mean_old']:.2f} -> "
                          f"{e['mean_new']:.2f}, n {e['n']})"), metrics
    return verdict, reason, metrics


class ProbeSummary(TypedDict):
    """One arm of a probe, as its backtest's metrics keep it (`new` and `old`)."""

    n: int
    accuracy: float
    reward_mean: float
    dead_frac: float
    invalid: int
    """Rollouts a validity diagnostic flags..."""
    invalid_high: list[int | None]
    """...the ids of those that still score high, and their labels' counts."""
    invalid_high_by_label: dict[str, int]
    tokens: float


def _probe_summary(rows: list[RolloutRow], h: Harness) -> ProbeSummary:
    groups = stored_groups(rows)
    thr = reward_threshold(h.weights)
    invalid = [r for r in rows if split_labels(r.get("labels")) & h.validity]
    high = [r for r in invalid if float(r.get("reward") or 0) > thr]
    by_label: dict[str, int] = {}
    for r in high:
        for label in split_labels(r.get("labels")) & h.validity:
            by_label[label] = by_label.get(label, 0) + 1
    return {
        "n": len(rows),
        "accuracy": statistics.fmean([bool(r.get("correct")) for r in rows]) if rows else 0.0,
        "reward_mean": statistics.fmean([float(r.get("reward") or 0) for r in rows]) if rows else 0.0,
        "dead_frac": sum(g.dead for g in groups) / len(groups) if groups else 0.0,
        "invalid": len(invalid),
        "invalid_high": [r.get("id") for r in high],
        "invalid_high_by_label": by_label,
        "tokens": statistics.fmean([r.get("completion_tokens") or 0 for r in rows]) if rows else 0.0,
    }


def _probe(ctx: EvolveContext, h: Harness) -> list[RolloutRow]:
    """Rollout rows of `h` (the loop sizes the probe: `evolve_hooks.probe_size`)."""
    assert ctx.policy is not None  # _probe_one fails the candidate first when there is none
    probes = ctx.memo.probes
    if h.sha not in probes:  # the incumbent is probed once per round, not once per candidate
        probes[h.sha] = list(ctx.policy.generate(h, ctx.cfg.evolve.probe_tasks))
    return probes[h.sha]


def needs_trial(cand: Harness, incumbent: Harness) -> str | None:
    """Why neither a replay nor a probe can judge this change, or None: the one rule in
    `space.why_trial` (what the proposer's `Knob.needs_trial` reads too). A hint or resampling
    change never passes on replay or probe evidence: it is left for a trial or the population."""
    return space.why_trial(cand, incumbent)


def _blocked(new: ProbeSummary) -> Blocked | None:
    if len(new["invalid_high"]) >= BLOCK_MIN and len(new["invalid_high"]) > BLOCK_SHARE * max(new["invalid"], 1):
        by_label = new["invalid_high_by_label"]
        label = max(by_label, key=lambda k: by_label[k])
        return {"label": label, "examples": new["invalid_high"][:8]}
    return None


def probe_decision(old_rows: list[RolloutRow], new_rows: list[RolloutRow], min_gain: float, min_effect: float,
                   alpha: float = ALPHA) -> Decision:
    """Paired over prompts (the same prompts and sampling seeds in both arms): a prompt's
    accuracy averaged over its rollouts, compared by a seeded bootstrap."""
    old = per_unit((r.get("task_id"), float(r.get("correct") or 0)) for r in old_rows)
    new = per_unit((r.get("task_id"), float(r.get("correct") or 0)) for r in new_rows)
    effect = paired_bootstrap(*pair_up(old, new), seed=0, metric="accuracy", alpha=alpha)
    return decide(effect, min_gain, min_effect=min_effect, alpha=alpha)


def trial_decision(old_arm: TrialArm, new_arm: TrialArm, min_gain: float, min_effect: float) -> Decision:
    """Validation verdicts of the two policy copies, paired by problem (exact McNemar test)."""
    if old_arm.task_ids != new_arm.task_ids:
        raise ValueError("the trial's arms were validated on different problems")
    effect = paired_binary(old_arm.correct, new_arm.correct, metric="validation accuracy")
    return decide(effect, min_gain, min_effect=min_effect)


def _arm_summary(arm: TrialArm) -> JSON:
    """What a backtest row keeps of one trial arm."""
    return {"accuracy": statistics.fmean(arm.correct) if arm.correct else 0.0, "n": len(arm.correct),
            "rollouts": arm.rollouts, "seconds": round(arm.seconds, 2)}


def _trial_one(ctx: EvolveContext, row: Intervention, cand: Harness, why: str, t0: float) -> Verdict:
    """A paired trial (`backend.trial`): k training steps of a policy copy under the candidate
    and under the incumbent, judged on the validation set at fixed difficulty."""
    store, ev = ctx.store, ctx.cfg.evolve
    assert ctx.policy is not None and ctx.policy.trials  # the schedule asks for a trial only where it may
    try:
        old_arm, new_arm = ctx.policy.trial(cand)
    except Exception as e:  # a trial that crashes is a failed candidate, not a failed round
        return _record(store, row.id, "trial", 0, "failed", f"trial failed: {type(e).__name__}: {e}"[:300],
                       {"evidence": "trial", "why_trial": why}, 0.0, t0)
    dec = trial_decision(old_arm, new_arm, ev.min_gain, ev.min_effect)
    m = {"evidence": "trial", "why_trial": why, "trial_steps": ev.trial_steps, "incumbent_version": ctx.harness_version,
         "decision": dec.record(), "old": _arm_summary(old_arm), "new": _arm_summary(new_arm)}
    score = round(dec.effect, 4) if dec.status == "passed" else 0.0
    return _record(store, row.id, "trial", new_arm.rollouts, dec.status,
                   f"trial ({ev.trial_steps} steps, validation): {dec.reason}", m, score, t0)


def _probe_one(ctx: EvolveContext, row: Intervention, entry: Scheduled) -> Verdict:
    store, ev = ctx.store, ctx.cfg.evolve
    t0 = time.perf_counter()
    if ctx.policy is None:
        return _record(store, row.id, "probe", 0, "failed", "no probe available for a generation-side change",
                       {}, 0.0, t0)
    try:  # loading runs the candidate's top level in the harness worker, never here
        cand = Harness.from_code(row.code)
    except HarnessError as e:
        return _record(store, row.id, "probe", 0, "failed", f"candidate does not load: {e}"[:300], {}, 0.0, t0)
    why = needs_trial(cand, ctx.harness)
    if why and entry.evidence is Evidence.TRIAL:
        if ctx.memo.trials >= ev.max_trials:
            return _record(store, row.id, "probe", 0, "inconclusive",
                           f"{why}: it needs a trial, and this round's {ev.max_trials} (evolve.max_trials) are spent",
                           {"evidence": "none: trial budget spent"}, 0.0, t0)
        ctx.memo.trials += 1
        return _trial_one(ctx, row, cand, why, t0)
    if why:
        off = ("trials run only in spent rounds here, evolve.trials = spent" if ctx.policy.trials
               else "evolve.trials is off here")
        return _record(store, row.id, "probe", 0, "inconclusive",
                       f"{why}: it needs a trial judged on the validation set, not a probe ({off})",
                       {"evidence": "none: trials off"}, 0.0, t0)
    try:
        new_rows, old_rows = _probe(ctx, cand), _probe(ctx, ctx.harness)
    except Exception as e:  # a probe that crashes is a failed candidate, not a failed round
        return _record(store, row.id, "probe", 0, "failed", f"probe failed: {type(e).__name__}: {e}"[:300],
                       {}, 0.0, t0)
    new, old = _probe_summary(new_rows, cand), _probe_summary(old_rows, ctx.harness)
    m = {"new": new, "old": old, "incumbent_version": ctx.harness_version}
    m["deltas"] = {"accuracy": new["accuracy"] - old["accuracy"], "dead": old["dead_frac"] - new["dead_frac"]}
    if not new_rows or not old_rows:
        return _record(store, row.id, "probe", 0, "failed", "probe produced no rollouts", m, 0.0, t0)
    blocked = _blocked(new)
    if blocked:
        m["blocked"] = blocked
        reason = (f"blocked by validity diagnostic {blocked['label']}: {len(new['invalid_high'])} of "
                  f"{new['invalid']} invalid rollouts score high in the probe")
        return _record(store, row.id, "probe", len(new_rows), "failed", reason, m, 0.0, t0)
    looked = entry.look_of  # a later look spends half the error rate, as in replay
    dec = probe_decision(old_rows, new_rows, ev.min_gain, ev.min_effect, alpha=ALPHA / 2 if looked else ALPHA)
    m["decision"] = dec.record()
    score = round(dec.effect, 4) if dec.status == "passed" else 0.0
    look = f"later look at #{looked} (alpha {ALPHA / 2}): " if looked else ""
    return _record(store, row.id, "probe", len(new_rows), dec.status, f"probe: {look}{dec.reason}", m, score, t0)
