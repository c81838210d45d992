"""One evolution round, top to bottom (called by the loop every `evolve.every` steps).

    observe    the failure table and drift metrics of the last `window` steps (`diagnose`),
               recorded as the round's row
    schedule   which candidates the round tries (`schedule.plan`): revisions of the diagnostics,
               looks at inconclusive candidates, the proposer's moves, minus what the churn
               rules refuse; each recorded, with what judges it
    judge      replay, probe or trial each candidate next to the incumbent (`backtest.judge`),
               one at a time, so a pause or a stop is honoured between candidates
    decide     auto mode promotes the best passed candidate, then the next ones in turn
               (`evolve.promotions_per_round`); each later one is first rebased onto the version
               just promoted and judged again, as a step of the round (`promotion.rebase`);
               inconclusive ones and (in supervised mode) passed ones wait for the operator
    report     the round's one-line summary, stored on its row and logged (`records.RoundReport`)

Each step is one call whose typed result (`records.py`) is the next one's input.
`run_round` never raises: an error is logged, stored on the round, and the
report says so. The loop keeps training either way. It returns the round's
`Effects` (`context.py`): the harness it promoted, the log lines, the report.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import cast

from backend.types import JSON

from . import backtest, diagnose, promotion, schedule
from . import interventions as iv
from .context import Effects, EvolveContext, Memo
from .interventions import Candidate, normalise
from .records import Decision, Observation, RoundReport, Schedule, Scheduled, Status, Verdict

DISABLED = "evolution is disabled (evolve.enabled = false)"


def run_round(ctx: EvolveContext) -> Effects:
    """Run a full round; returns its effects, with its report (also stored on the `rounds` row)."""
    t0 = time.perf_counter()
    ctx.effects, ctx.memo = Effects(), Memo()
    if not ctx.cfg.evolve.enabled:
        return report(ctx, RoundReport(ctx.step, ctx.harness_version, error=DISABLED))
    seen: Observation | None = None
    plan, verdicts, made, error = Schedule(), list[Verdict](), Decision(), None
    try:
        seen = observe(ctx)
        plan = schedule.plan(ctx, seen)
        verdicts = backtest.judge(ctx, plan.entries, pause=True)
        made = promotion.decide(ctx, verdicts)
        while made.rebase is not None:  # the next promotion is built on a version no longer active
            made = promotion.decide(ctx, backtest.judge(ctx, promotion.rebase(ctx, made.rebase, "auto mode")), made)
    except Exception as e:
        error = _failed(ctx, e)
    ms = round((time.perf_counter() - t0) * 1000, 1)
    return report(ctx, RoundReport(ctx.step, ctx.harness_version, seen.round_id if seen else None, seen, plan,
                                   tuple(verdicts), made, error, ms))


def observe(ctx: EvolveContext) -> Observation:
    """The window's failure table and metrics, recorded as the round's row."""
    steps = range(max(1, ctx.step - ctx.cfg.evolve.window + 1), ctx.step + 1)
    table, metrics = diagnose.failure_table(ctx.store, steps), diagnose.round_metrics(ctx.store, steps)
    # the store keeps both as JSON
    rid = ctx.store.add_round(ctx.step, ctx.harness_version, cast(list[JSON], table), cast(JSON, metrics))
    return Observation(ctx.step, steps, table, metrics, rid)


def report(ctx: EvolveContext, done: RoundReport) -> Effects:
    """Store the round's summary on its row, log it, and hand the effects to the loop."""
    if done.error is None and done.round_id is not None:
        ctx.log("info", f"round at step {ctx.step}: {done.text()}")
    if done.round_id is not None:
        try:
            ctx.store.finish_round(done.round_id, done.text(), [dataclasses.asdict(s) for s in done.plan.skipped],
                                   None if done.plan.spent is None else list(done.plan.spent))
        except Exception:
            pass  # the store itself is the problem; the loop will notice
    ctx.effects.report = done
    return ctx.effects


def _failed(ctx: EvolveContext, e: Exception) -> str:
    error = f"{type(e).__name__}: {e}"
    ctx.log("error", f"evolution round at step {ctx.step} failed: {error}")
    try:
        ctx.store.log("error", traceback.format_exc()[-4000:], kind="evolve", step=ctx.step)
    except Exception:
        pass  # the store itself is the problem; the loop will notice
    return error


def submit(ctx: EvolveContext, code: str, title: str, hypothesis: str = "", target: str = "",
           proposer: str = "operator", expected: str = "") -> Verdict:
    """Record and judge one candidate given as whole harness code (an operator's edit, or a test's
    planted harness). Returns its verdict."""
    c = Candidate(title=title, code=code, parent_version=ctx.harness_version, parent_code=ctx.harness.code,
                  proposer=proposer, target=target, hypothesis=hypothesis, expected=expected)
    norm = normalise(code)
    same = [v["id"] for v in ctx.store.harness_versions() if normalise(v["code"]) == norm]
    if same:  # an operator's edit is recorded (and counted) as failed; only rounds skip silently
        c.error = f"same code as harness v{same[0]}: nothing to backtest"
    entry: Scheduled = schedule.record(ctx, None, c)
    row = iv.get(ctx.store, entry.id)
    if row.status != "proposed":
        return Verdict(entry.id, Status.FAILED, row.reason or "", 0.0)
    return backtest.judge(ctx, [entry])[0]

