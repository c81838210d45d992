"""One explore move for a member of a population of runs, through the safety gate.

    move = propose_move(store, cfg, step, tried)    # a gated candidate (recorded), or None

The offline proposer (`offline.propose`) ranks the typed search space's knobs
(`space.py`: curriculum, sampling, token budget, advantage rule, reward
weights, filters...) against the member's failure table; every knob is
eligible, including those only training can judge. Candidates are recorded as
interventions of the member's run (`schedule.record`: the static harness check
refuses a forbidden import or a multi-factor change before any code runs),
then pass the safety gate every candidate passes: the candidate and the
incumbent are replayed over the member's stored rollouts in the worker
sandbox (`replay.replay`; a candidate that crashes, hangs or returns garbage
there fails), and a reward change is replayed over adversarial copies of wrong
rollouts (`backtest._adversarial`: one that pays them more than the incumbent
does fails). Nothing else is asked of it: whether a move helps is judged by
what training with it does, at the population's next comparison, not by
replay proxies. The gate's result is a `backtests` row (mode POPULATION_GATE),
and the intervention ends `passed` or `failed`.

`taken`: the knobs other members' moves of the same comparison drew; each
member of a stuck comparison tries a different one.

`tried`: the knob moves the population already tried that then tied or lost
(`TriedMove`, from its lineage). A candidate that repeats one (`repeats`: the
same knob the same way, or its undo) is not drawn, so the knob's next option
in the ranking is: after `CURRICULUM.level` 1 -> 0 tied, the next dead-group
knob (a hint, resampling, a pass-rate target, the token budget). The proposer
draws one candidate per knob, its most promising way first; when that way was
tried, the knob sits this move out rather than going the way its diagnosis
does not point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from backend.config import RunConfig
from backend.harness.loader import Harness
from backend.store import Store

from . import backtest, diagnose, interventions as iv, offline, schedule
from .budget import POPULATION_GATE
from .context import EvolveContext
from .interventions import Candidate
from .replay import adversarial_copies, replay


@dataclass(frozen=True)
class ExploreMove:
    """A gated move: its intervention in the member's run, the knob, old -> new, diff, diagnosis."""

    intervention_id: int
    code: str
    parent_version: int
    knob: str
    old_value: str
    new_value: str
    diff: str
    diagnosis: str
    target: str


@dataclass(frozen=True)
class TriedMove:
    """A knob move the population tried that tied or lost: knob, old -> new (as events store them)."""

    knob: str
    old: str
    new: str


def _number(text: str) -> float | None:
    try:
        return float(text) if text not in ("True", "False") else None
    except ValueError:
        return None


def _way(old: str, new: str) -> float | str:
    """A numeric move's direction (+1 / -1); a bool or choice move's new value."""
    a, b = _number(old), _number(new)
    return (1.0 if b > a else -1.0) if a is not None and b is not None and a != b else new


def repeats(tried: Sequence[TriedMove], knob: str, old: str, new: str) -> TriedMove | None:
    """The tried move that `knob: old -> new` repeats, or None: the same knob the same way (a
    number the same direction, a bool or choice the same value), or the tried move's undo (a tie
    says both values train alike).

    >>> t = [TriedMove("CURRICULUM.level", "1", "0")]
    >>> [bool(repeats(t, "CURRICULUM.level", o, n)) for o, n in (("2", "1"), ("0", "1"), ("1", "2"))]
    [True, True, False]
    >>> bool(repeats(t, "SAMPLING.hint", "0.0", "0.2"))
    False
    """
    for t in tried:
        if t.knob == knob and (_way(t.old, t.new) == _way(old, new) or (t.old, t.new) == (new, old)):
            return t
    return None


def propose_move(store: Store, cfg: RunConfig, step: int, tried: Sequence[TriedMove] = (),
                 taken: Sequence[str] = (),
                 propose: Callable[..., list[Candidate]] = offline.propose) -> ExploreMove | None:
    """The first knob move of the offline proposer's ranking, built on the member's active
    harness, that repeats no `tried` move, moves no knob in `taken` (other members' moves of the
    same comparison) and passes the safety gate; None when none does (each gated try stays
    recorded). `propose`: the proposer (`offline.propose`'s signature; a test passes hostile
    ones)."""
    hv = int(store.run()["harness_version"])
    harness = Harness.from_code((store.harness_version(hv) or {})["code"])
    ctx = EvolveContext(store, cfg, step, hv, harness)
    steps = range(max(1, step - cfg.evolve.window + 1), step + 1)
    table, metrics = diagnose.failure_table(store, steps), diagnose.round_metrics(store, steps)
    # one candidate per knob at most: `tried` can take that many slots from the ranking
    n = cfg.evolve.candidates + len({t.knob for t in tried} | set(taken))
    cands = propose(ctx, table, metrics, n, store.known_codes(), trials=True)
    shares = {row["label"]: row["share"] for row in table}
    for c in cands:
        if "knob" not in c.params or c.parent_version != hv:
            continue
        if str(c.params["knob"]) in taken or repeats(tried, str(c.params["knob"]), str(c.params.get("from")),
                                                  str(c.params.get("to"))):
            continue
        entry = schedule.record(ctx, None, c)
        if iv.get(store, entry.id).status != "proposed":  # the static check refused it
            continue
        if _gate(ctx, entry.id, c):
            p = c.params
            why = (f"{c.target} in {shares.get(c.target, 0.0):.0%} of the last {len(steps)} steps' rollouts; "
                   if c.target else "") + c.hypothesis
            return ExploreMove(entry.id, c.code, hv, str(p["knob"]), str(p.get("from")), str(p.get("to")),
                               c.diff(), why, c.target)
    return None


def _gate(ctx: EvolveContext, iid: int, c: Candidate) -> bool:
    """The worker sandbox and the adversarial replay; records the verdict. True: passed."""
    t0 = time.perf_counter()
    iv.transition(ctx.store, iid, "backtesting", "population safety gate started")
    rows = backtest.replay_window(ctx, [])
    timeout = ctx.cfg.evolve.backtest_timeout_s
    verdict, reason = "passed", "safety gate passed: it runs in the sandbox and pays no adversarial copy more"
    if not rows:
        verdict, reason = "failed", "no stored rollouts to replay: the sandbox cannot vouch for it"
    else:
        base, cand = replay([ctx.harness.code, c.code], rows, timeout)
        if cand.error:
            verdict, reason = "failed", f"the worker sandbox refused it: {cand.error}"[:300]
        else:
            fakes, kinds = adversarial_copies(rows)
            if fakes:
                base_fake, cand_fake = replay([ctx.harness.code, c.code], fakes, timeout)
                verdict, reason, _ = backtest._adversarial(base_fake, cand_fake, kinds, (verdict, reason, {}))
    bid = ctx.store.add_backtest(iid, mode=POPULATION_GATE, n_rollouts=len(rows), metrics={}, verdict=verdict,
                                 reason=reason, ms=(time.perf_counter() - t0) * 1000, stats={}, score=0.0)
    iv.transition(ctx.store, iid, verdict, reason, backtest_id=bid)
    return verdict == "passed"
