"""Backtest proposed interventions before anything trains on them.

Changes that replay can judge (rewards, extraction helpers, filters, the
advantage rule, diagnostics) are replayed over stored rollouts next to the
incumbent (see `replay` and `judge`). Changes that only show in fresh
generations (prompt, sampling, curriculum) get a short probe: the loop's
`probe(harness, n_tasks)` generates a few groups with the current policy under
the candidate and under the incumbent, and the two are compared.

Every backtest is a `backtests` row (mode, metrics_json, verdict, reason) and
moves its intervention from backtesting to passed or failed.
"""

from __future__ import annotations

import statistics
import time

from backend.harness.loader import Harness, HarnessError
from backend.harness.semantics import is_dead
from backend.store import dumps, loads, now

from . import interventions as iv
from .judge import BLOCK_MIN, BLOCK_SHARE, judge, threshold
from .replay import replay, select_rows


def fixed_ids(store) -> set[int]:
    """Rollouts that the promoted (and not rolled back) interventions fixed."""
    out: set[int] = set()
    for r in store.rows("SELECT b.metrics_json FROM backtests b JOIN interventions i ON i.id = b.intervention_id "
                        "WHERE i.status = 'promoted' AND b.verdict = 'passed'"):
        out.update(loads(r["metrics_json"], {}).get("fixed_ids", []))
    return out


def _record(store, iid: int, mode: str, n: int, verdict: str, reason: str, metrics: dict, score: float,
            t0: float) -> dict:
    with store.tx():
        bid = store.insert("backtests", {
            "intervention_id": iid, "created_at": now(), "mode": mode, "n_rollouts": n,
            "metrics_json": dumps(metrics), "verdict": verdict, "reason": reason,
            "ms": (time.perf_counter() - t0) * 1000})
        store.update("interventions", iid, {"score": score})
    iv.transition(store, iid, verdict, reason, backtest_id=bid)
    return {"id": iid, "verdict": verdict, "reason": reason, "score": score, "backtest_id": bid}


def backtest(ctx, iids: list[int]) -> list[dict]:
    """Backtest the given `proposed` interventions; returns one result dict each. Never raises
    for a bad candidate: it fails with the reason."""
    store = ctx.store
    todo = [store.get("interventions", i) for i in iids]
    for row in todo:
        iv.transition(store, row["id"], "backtesting", "backtest started")
    replayed = [r for r in todo if r["kind"] not in iv.PROBE_KINDS]
    probed = [r for r in todo if r["kind"] in iv.PROBE_KINDS]
    return _replay_all(ctx, replayed) + [_probe_one(ctx, r) for r in probed]


def _replay_all(ctx, todo: list[dict]) -> list[dict]:
    if not todo:
        return []
    store, cfg = ctx.store, ctx.cfg.evolve
    t0 = time.perf_counter()
    fixed = fixed_ids(store)
    rows = select_rows(store, ctx.step, cfg.window, sorted(fixed))
    if not rows:
        return [_record(store, r["id"], "replay", 0, "failed", "no stored rollouts to replay", {}, 0.0, t0)
                for r in todo]
    results = replay([ctx.harness.code] + [r["code"] for r in todo], rows, cfg.backtest_timeout_s)
    out = []
    for row, res in zip(todo, results[1:]):
        names = iv.params(row).get("names", [])
        try:
            verdict, reason, metrics, score = judge(row["kind"], names, rows, results[0], res, fixed, cfg.min_gain)
        except Exception as e:  # odd replay output (the candidate's constants) fails its candidate only
            verdict, reason, metrics, score = "failed", f"judging the replay failed: {type(e).__name__}: {e}"[:300], \
                {}, 0.0
        metrics["incumbent_version"] = ctx.harness_version
        out.append(_record(store, row["id"], "replay", len(rows), verdict, reason, metrics, score, t0))
    return out


def _probe_summary(rows: list[dict], h: Harness) -> dict:
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("step"), r.get("group_idx")), []).append(float(r.get("reward") or 0.0))
    thr = threshold(h.weights)
    invalid = [r for r in rows if set(filter(None, (r.get("labels") or "").split(","))) & h.validity]
    high = [r for r in invalid if float(r.get("reward") or 0) > thr]
    by_label: dict = {}
    for r in high:
        for label in set((r.get("labels") or "").split(",")) & h.validity:
            by_label[label] = by_label.get(label, 0) + 1
    return {
        "n": len(rows),
        "accuracy": statistics.fmean([bool(r.get("correct")) for r in rows]) if rows else 0.0,
        "reward_mean": statistics.fmean([float(r.get("reward") or 0) for r in rows]) if rows else 0.0,
        "dead_frac": (sum(1 for g in groups.values() if is_dead(g)) / len(groups))
        if groups else 0.0,
        "invalid": len(invalid),
        "invalid_high": [r.get("id") for r in high],
        "invalid_high_by_label": by_label,
        "tokens": statistics.fmean([r.get("completion_tokens") or 0 for r in rows]) if rows else 0.0,
    }


def _probe(ctx, h: Harness) -> list[dict]:
    cache = ctx.cache.setdefault("probe", {})
    if h.sha not in cache:  # the incumbent is probed once per round, not once per candidate
        cache[h.sha] = list(ctx.probe(h, ctx.cfg.evolve.probe_tasks))
    return cache[h.sha]


def _probe_one(ctx, row: dict) -> dict:
    store, min_gain = ctx.store, ctx.cfg.evolve.min_gain
    t0 = time.perf_counter()
    if ctx.probe is None:
        return _record(store, row["id"], "probe", 0, "failed", "no probe available for a generation-side change",
                       {}, 0.0, t0)
    try:  # loading runs the candidate's top level in the harness worker, never here
        cand = Harness.from_code(row["code"])
    except HarnessError as e:
        return _record(store, row["id"], "probe", 0, "failed", f"candidate does not load: {e}"[:300], {}, 0.0, t0)
    try:
        new_rows, old_rows = _probe(ctx, cand), _probe(ctx, ctx.harness)
    except Exception as e:  # a probe that crashes is a failed candidate, not a failed round
        return _record(store, row["id"], "probe", 0, "failed", f"probe failed: {type(e).__name__}: {e}"[:300],
                       {}, 0.0, t0)
    new, old = _probe_summary(new_rows, cand), _probe_summary(old_rows, ctx.harness)
    m = {"new": new, "old": old, "incumbent_version": ctx.harness_version}
    d_acc, d_dead = new["accuracy"] - old["accuracy"], old["dead_frac"] - new["dead_frac"]
    m["deltas"] = {"accuracy": d_acc, "dead": d_dead}
    n = len(new_rows)
    if not new_rows or not old_rows:
        verdict, reason, score = "failed", "probe produced no rollouts", 0.0
    elif len(new["invalid_high"]) >= BLOCK_MIN and len(new["invalid_high"]) > BLOCK_SHARE * max(new["invalid"], 1):
        verdict, score = "failed", 0.0
        label = max(new["invalid_high_by_label"], key=new["invalid_high_by_label"].get)
        m["blocked"] = {"label": label, "examples": new["invalid_high"][:8]}
        reason = (f"blocked by validity diagnostic {label}: {len(new['invalid_high'])} of {new['invalid']} "
                  "invalid rollouts score high in the probe")
    elif d_acc < -min_gain:
        verdict, score = "failed", 0.0
        reason = f"probe accuracy fell ({old['accuracy']:.2f} -> {new['accuracy']:.2f})"
    elif max(d_acc, d_dead) < min_gain:
        verdict, score = "failed", 0.0
        reason = f"no measurable gain in the probe (accuracy {d_acc:+.2f}, dead {d_dead:+.2f})"
    else:
        verdict, score = "passed", round(d_acc + 0.5 * d_dead, 4)
        reason = f"probe: accuracy {d_acc:+.2f}, dead groups {d_dead:+.2f}"
    return _record(store, row["id"], "probe", n, verdict, reason, m, score, t0)
