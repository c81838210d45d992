"""One evolution round, top to bottom (called by the loop every `evolve.every` steps).

    1. diagnose    failure table + drift metrics of the last `window` steps (`diagnose`)
    2. revise      a new diagnostic for unexplained failures, or retire a useless one (`diagnose`)
    3. propose     offline templates/skills, or the LLM proposer
    4. screen      the churn rules drop repeats before any backtest (`interventions.Rules`); the
                   round records and logs what it skipped and why
    5. backtest    replay (or probe) every candidate next to the incumbent
    6. gate        auto mode promotes the best passed candidate, then the next ones in turn,
                   each re-backtested on the version just promoted (`evolve.promotions_per_round`);
                   inconclusive ones and (in supervised mode) passed ones wait for the operator

`run_round` never raises: an error is logged, stored on the round, and the
summary says so. The loop keeps training either way. It returns the round's
`Effects` (`context.py`): the harness it promoted, the log lines, the summary.
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

from backend.types import JSON

from . import interventions as iv
from . import diagnose, llm, offline
from .interventions import Rules, normalise
from . import skills as sk
from .backtest import backtest
from .context import Effects, EvolveContext
from .gate import promote_in_turn


def _window(ctx: EvolveContext) -> range:
    return range(max(1, ctx.step - ctx.cfg.evolve.window + 1), ctx.step + 1)


def run_round(ctx: EvolveContext) -> Effects:
    """Run a full round; returns its effects, with the summary (also stored on the `rounds` row)."""
    t0 = time.perf_counter()
    summary: JSON = {"step": ctx.step, "round_id": None, "proposed": [], "passed": [], "inconclusive": [], "failed": [],
                     "skipped": [], "promoted": None, "harness_version": ctx.harness_version, "error": None}
    ctx.cache.clear()
    ctx.effects = Effects(summary=summary)
    if not ctx.cfg.evolve.enabled:
        summary["error"] = "evolution is disabled (evolve.enabled = false)"
        return ctx.effects
    try:
        _round(ctx, summary)
    except Exception as e:
        summary["error"] = f"{type(e).__name__}: {e}"
        ctx.log("error", f"evolution round at step {ctx.step} failed: {summary['error']}")
        try:
            ctx.store.log("error", traceback.format_exc()[-4000:], kind="evolve", step=ctx.step)
        except Exception:
            pass  # the store itself is the problem; the loop will notice
    summary["ms"] = round((time.perf_counter() - t0) * 1000, 1)
    _save(ctx, summary)
    return ctx.effects


def _save(ctx: EvolveContext, summary: JSON) -> None:
    if summary["round_id"] is None:
        return
    try:
        text = _text(summary)
        ctx.store.finish_round(summary["round_id"], text, summary["skipped"], summary.get("spent"))
    except Exception:
        pass


def _text(s: JSON) -> str:
    if s["error"]:
        return f"error: {s['error']}"
    also = "".join(f", then #{i}" for i in s.get("also_promoted") or [])
    promoted = f"; promoted #{s['promoted']}{also}, now v{s['harness_version']}" if s["promoted"] else ""
    skipped = f", {len(s['skipped'])} skipped (churn)" if s.get("skipped") else ""
    if s.get("spent") is not None:
        left = f"; left for a trial (evolve.trials off): {', '.join(s['spent'])}" if s["spent"] else ""
        skipped += f"; no untried move this run can judge{left}"
    return (f"{len(s['proposed'])} proposed, {len(s['passed'])} passed, {len(s.get('inconclusive') or [])} "
            f"inconclusive, {len(s['failed'])} failed{skipped}{promoted}")


def _round(ctx: EvolveContext, summary: JSON) -> None:
    store = ctx.store
    steps = _window(ctx)
    table, metrics = diagnose.failure_table(store, steps), diagnose.round_metrics(store, steps)
    summary["failure_table"] = [{k: e[k] for k in ("label", "count", "share", "trend")} for e in table[:6]]
    summary["metrics"] = metrics
    rid = store.add_round(ctx.step, ctx.harness_version, table, metrics)
    summary["round_id"] = rid
    rules = Rules(ctx)
    ctx.checkpoint(f"round at step {ctx.step}: proposing")
    found = propose_all(ctx, table, metrics, steps, rules)
    cands = rules.screen(found)
    summary["skipped"] = rules.skipped
    if not found and ctx.cfg.evolve.proposer == "offline":  # the offline proposer comes back empty only
        summary["spent"] = offline.left_for_trial(ctx)     # when every fresh, cooling and old move is tried
    for s in rules.skipped:
        ctx.log("info", f"skipped '{s['title']}' ({s['proposer']}): {s['reason']}")
    ids = [iv.record(store, rid, c) for c in cands]
    for c in cands:
        if c.skills and not c.error:
            sk.bump(store, c.skills, uses=1)
    summary["proposed"] = ids
    todo = [i for i in ids if iv.get(store, i).status == "proposed"]
    results = []
    for k, iid in enumerate(todo, 1):  # one at a time: a pause or stop is honoured between candidates
        ctx.checkpoint(f"round at step {ctx.step}: backtesting {k}/{len(todo)}")
        results += backtest(ctx, [iid])
    summary["passed"] = [r["id"] for r in results if r["verdict"] == "passed"]
    summary["inconclusive"] = [r["id"] for r in results if r["verdict"] == "inconclusive"]
    summary["failed"] = [i for i in ids if i not in summary["passed"] and i not in summary["inconclusive"]]
    if summary["passed"] and ctx.auto_promote():
        made = promote_in_turn(ctx, summary["passed"], ctx.cfg.evolve.promotions_per_round)
        if made:
            summary["promoted"], summary["also_promoted"] = made[0], made[1:]
            summary["harness_version"] = ctx.harness_version
    ctx.log("info", f"round at step {ctx.step}: {_text(summary)}")


SECOND_LOOKS = 1
"""Inconclusive replays looked at again per round (`interventions.second_looks`), before new candidates."""


def propose_all(ctx: EvolveContext, table: list[JSON], metrics: JSON, steps: range,
                rules: Rules | None = None) -> list[iv.Candidate]:
    """Revision candidates first (at most two), then one second look at an inconclusive
    replay that more data could settle, then the configured proposer fills the slots; slots the
    offline proposer leaves empty go to later looks at old inconclusive candidates.
    With `rules`, revision and offline candidates that the churn rules refuse do not take a slot."""
    cfg = ctx.cfg.evolve
    parent, code = ctx.harness_version, ctx.harness.code
    exclude = iv.known_codes(ctx.store) | {code}
    out: list[iv.Candidate] = []
    makers: tuple[Callable[[], iv.Candidate | None], ...] = (
        lambda: diagnose.propose_new(ctx, steps, parent, code),
        lambda: diagnose.propose_retire(ctx, parent, code))
    for make in makers:
        try:
            c = make()
        except Exception as e:  # a revision bug must not cost the round its other candidates
            ctx.log("warning", f"diagnostic revision failed: {type(e).__name__}: {e}")
            c = None
        if c is not None and c.code not in exclude and (rules is None or rules.reason(c) is None):
            exclude.add(c.code)
            out.append(c)
    for c in iv.second_looks(ctx)[:SECOND_LOOKS]:
        if rules is None or rules.reason(c) is None:
            out.append(c)
    n = max(1, cfg.candidates - len(out))
    if cfg.proposer == "llm":
        return out + llm.propose(ctx, table, metrics, n, exclude)
    got = offline.propose(ctx, table, metrics, n, exclude, screen=rules.reason if rules else None)
    if rules is not None and len(got) < n:  # every fresh option is cooling down: rather than an empty
        exclude |= {c.code for c in got}     # slot, the best of them go on (interventions, cooldown)
        got += offline.propose(ctx, table, metrics, n - len(got), exclude, screen=rules.waived)
    if rules is not None and len(got) < n:  # nothing fresh left: look again at what today's policy may
        got += [c for c in iv.later_looks(ctx, n - len(got)) if rules.reason(c) is None]  # answer otherwise
    if rules is not None and not out and not got:  # a spent round: under evolve.trials = "spent", a trial
        got = offline.propose_for_spent_round(ctx, table, metrics, exclude, rules.reason)
    return out + got


def submit(ctx: EvolveContext, code: str, title: str, hypothesis: str = "", target: str = "",
           proposer: str = "operator", expected: str = "") -> JSON:
    """Record and backtest one candidate given as whole harness code (an operator's edit,
    or a test's planted harness). Returns the backtest result."""
    c = iv.Candidate(title=title, code=code, parent_version=ctx.harness_version, parent_code=ctx.harness.code,
                     proposer=proposer, target=target, hypothesis=hypothesis, expected=expected)
    norm = normalise(code)
    same = [v["id"] for v in ctx.store.harness_versions() if normalise(v["code"]) == norm]
    if same:  # an operator's edit is recorded (and counted) as failed; only rounds skip silently
        c.error = f"same code as harness v{same[0]}: nothing to backtest"
    iid = iv.record(ctx.store, None, c)
    row = iv.get(ctx.store, iid)
    if row.status != "proposed":
        return {"id": iid, "verdict": "failed", "reason": row.reason, "score": 0.0}
    return backtest(ctx, [iid])[0]
