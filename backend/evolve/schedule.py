"""Which candidates a round tries, and what judges each: the one owner of the round's slots.

    plan = schedule.plan(ctx, seen)      # seen: the round's Observation
    plan.entries                         # recorded candidates to judge, in order (id, evidence, look_of)

A round's slots (`evolve.candidates`), filled in this order:

1. revision candidates, at most two: a new diagnostic for unexplained failures, a useless one retired;
2. SECOND_LOOKS second look at an inconclusive replay that more rollouts could now settle
   (`second_looks`);
3. the configured proposer (offline or LLM) fills the rest;
4. slots the offline proposer leaves empty go to options that are cooling down, their cooldown
   waived (`Rules.waived`), then to later looks at old inconclusive candidates (`later_looks`);
5. a round that found nothing at all is spent: under `evolve.trials = "spent"` it offers up to
   `evolve.max_trials` moves only a trial can judge (`spent_round`); otherwise it records the
   knobs that were left out for want of a trial (`left_for_trial`).

**No churn** (`Rules`, read from the run once per round): a candidate is not tried again when

- **same code**: its normalised code (`interventions.normalise`, so comments and layout do not
  count) equals the active harness, an earlier version, or a candidate this run already
  proposed (a look at an inconclusive candidate excepted);
- **same change**: the run already promoted the same top-level name with the same normalised
  definition (or removed it again); re-applying what a branch reverted is churn;
- **retired stays retired**: a diagnostic a promotion retired comes back only from a revision
  candidate that names it from the current window's unlabeled failures;
- **cooldown**: a change kind (its template id, else `kind:name`) whose last `evolve.cooldown_after`
  decisions were all failed or inconclusive waits `evolve.cooldown_rounds` rounds after the last
  of them, unless the round would otherwise leave slots empty (then it is `waived`);
- **held until the policy moves** (`search_memory`, never waived): a move whose last try was
  inconclusive or changed nothing, and a knob or family (the system prompt's choices are one)
  whose last `search_memory.FAMILY_TRIES` tries were, wait until validation accuracy has moved
  beyond its 95% interval since (`search_memory.moved`); a later look waits for that too. Each
  refusal names the tries and the validation then and now, and lands in the round's `skipped`.

**Evidence** (`evidence`): a replay judges every change but a generation-side one (prompt,
sampling, curriculum, advantage); those get a probe, and the ones a probe cannot judge
(`backtest.needs_trial`) a paired trial where this run may run one: trials on, and under
`evolve.trials = "spent"` only for a spent round's moves.

A recorded intervention keeps the schedule's marks in its params (`second_look_of`,
`cooldown_waived`, `spent_round_trial`): written and read here only, at the store boundary.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, TYPE_CHECKING

from backend.types import Intervention

from . import diagnose, llm, offline
from . import interventions as iv
from . import search_memory as memory
from . import skills as sk
from .edit import EditError, changed_names
from .interventions import (BAD, GOOD, FRESH_KINDS, REMOVED, Candidate, Evidence, Refusal, change_of, kind_key,
                            normalise)
from .records import Observation, Schedule, Scheduled, Skip


if TYPE_CHECKING:
    from .context import EvolveContext


SECOND_LOOKS = 1
"""Inconclusive replays looked at again per round (`second_looks`), before new candidates."""
LOOK_GROWTH = 1.5
"""A second look needs at least this many times the rollouts the first replay read."""
LATER_LOOK_ROUNDS = 10
"""Rounds after its decision before an inconclusive candidate may be looked at once more (`later_looks`)."""

SECOND_LOOK = "second_look_of"
WAIVED = "cooldown_waived"
SPENT_TRIAL = "spent_round_trial"
"""Param keys of the schedule's marks on a recorded intervention (see the module docstring)."""


# ---------------------------------------------------------------- the round's plan

def plan(ctx: EvolveContext, seen: Observation) -> Schedule:
    """Propose, screen and record this round's candidates; returns what the judge is to try."""
    rules = Rules(ctx)
    ctx.checkpoint(f"round at step {ctx.step}: proposing")
    found = propose_all(ctx, seen, rules)
    cands = rules.screen(found)
    for s in rules.skipped:
        ctx.log("info", f"skipped '{s.title}' ({s.proposer}): {s.reason}")
    spent = None
    if not found and ctx.cfg.evolve.proposer == "offline":  # the offline proposer comes back empty only
        spent = tuple(left_for_trial(ctx))                  # when every fresh, cooling and old move is tried
    recorded = [record(ctx, seen.round_id, c) for c in cands]
    for c in cands:
        if c.skills and not c.error:
            sk.bump(ctx.store, c.skills, uses=1)
    todo = tuple(s for s in recorded if iv.get(ctx.store, s.id).status == "proposed")
    return Schedule(tuple(s.id for s in recorded), todo, tuple(rules.skipped), spent)


def propose_all(ctx: EvolveContext, seen: Observation, rules: Rules | None = None) -> list[Candidate]:
    """The round's candidates, slot by slot (the module docstring's order). With `rules`,
    revision and offline candidates that the churn rules refuse do not take a slot."""
    cfg = ctx.cfg.evolve
    exclude = iv.known_codes(ctx.store) | {ctx.harness.code}
    out = [c for c in _revisions(ctx, seen.steps)
           if c.code not in exclude and (rules is None or rules.reason(c) is None)]
    exclude |= {c.code for c in out}
    out += [c for c in second_looks(ctx)[:SECOND_LOOKS] if rules is None or rules.reason(c) is None]
    n = max(1, cfg.candidates - len(out))
    table, metrics, trials = seen.table, seen.metrics, judgeable_by_trial(ctx)
    if cfg.proposer == "llm":
        return out + llm.propose(ctx, table, metrics, n, exclude, trials)
    got = offline.propose(ctx, table, metrics, n, exclude, trials, screen=rules.reason if rules else None)
    if rules is not None and len(got) < n:  # every fresh option is cooling down: rather than an
        got += offline.propose(ctx, table, metrics, n - len(got), exclude | {c.code for c in got}, trials,
                               screen=rules.waived)  # empty slot, the best of them go on
    if rules is not None and len(got) < n:  # nothing fresh left: look again at what today's policy
        got += [c for c in later_looks(ctx, n - len(got), rules.memory)  # may answer otherwise
                if rules.reason(c) is None]
    if rules is not None and not out and not got:
        got = spent_round(ctx, seen, exclude, rules.reason)
    return out + got


def _revisions(ctx: EvolveContext, steps: range) -> list[Candidate]:
    """A new diagnostic and a retirement, where the window asks for one (at most one each)."""
    parent, code = ctx.harness_version, ctx.harness.code
    out: list[Candidate] = []
    for new in (True, False):
        try:
            c = diagnose.propose_new(ctx, steps, parent, code) if new else diagnose.propose_retire(ctx, parent, code)
        except Exception as e:  # a revision bug must not cost the round its other candidates
            ctx.log("warning", f"diagnostic revision failed: {type(e).__name__}: {e}")
            c = None
        if c is not None and all(c.code != o.code for o in out):
            out.append(c)
    return out


def record(ctx: EvolveContext, round_id: int | None, c: Candidate) -> Scheduled:
    """Store `c` (`interventions.record`) with the schedule's marks; returns how to judge it."""
    marks = {SECOND_LOOK: c.look_of, WAIVED: c.waived or None, SPENT_TRIAL: c.evidence is Evidence.TRIAL or None}
    stored = dataclasses.replace(c, params=dict(c.params, **{k: v for k, v in marks.items() if v is not None}))
    iid = iv.record(ctx.store, round_id, stored)
    c.error = stored.error
    return scheduled(ctx, iv.get(ctx.store, iid))


def scheduled(ctx: EvolveContext, row: Intervention) -> Scheduled:
    """How the judge tries a recorded intervention: its marks read back from the store."""
    asked = Evidence.TRIAL if row.params.get(SPENT_TRIAL) else None
    return Scheduled(row.id, evidence(ctx, row.kind, asked), look_of(row))


def look_of(row: Intervention) -> int | None:
    """The intervention `row` looks at again, or None when it is a first look."""
    v = row.params.get(SECOND_LOOK)
    return int(v) if v else None


# ---------------------------------------------------------------- evidence and trials

def evidence(ctx: EvolveContext, kind: str, asked: Evidence | None = None) -> Evidence:
    """What judges a change of `kind`: a replay, else a probe, or a trial where this run may run one
    for it (a probe then hands over a change it cannot judge: `backtest.needs_trial`)."""
    if kind not in FRESH_KINDS:
        return Evidence.REPLAY
    trials = ctx.policy is not None and ctx.policy.trials
    return Evidence.TRIAL if trials and (not trials_when_spent(ctx) or asked is Evidence.TRIAL) else Evidence.PROBE


def trials_when_spent(ctx: EvolveContext) -> bool:
    """`evolve.trials = "spent"` in a run that can trial: only a spent round offers moves that need
    a trial (`spent_round`), and only those are trialled (`evidence`)."""
    return ctx.cfg.evolve.trials == "spent" and ctx.policy is not None and ctx.policy.trials


def judgeable_by_trial(ctx: EvolveContext, spent: bool = False) -> bool:
    """Whether a change that needs a trial can end anywhere but `inconclusive` in this run (for a
    spent round's last pass: `spent`). Without trials (`evolve.trials` off, as on the CPU and in
    the gpu profile) an inconclusive change waits for an operator; in auto-promote mode nobody is
    asked, so proposing it would only take a slot from a change the gate can judge."""
    if not ctx.auto_promote():
        return True
    if ctx.policy is None or not ctx.policy.trials:
        return False
    return not trials_when_spent(ctx) or spent


def spent_round(ctx: EvolveContext, seen: Observation, exclude: set[str],
                screen: Callable[[Candidate], str | None] | None = None) -> list[Candidate]:
    """Under `evolve.trials = "spent"`, for a round that found nothing else to try: up to
    `evolve.max_trials` moves that need a trial (sampling, advantage, curriculum), each asking
    for a trial. Otherwise, or where trials cannot run: nothing."""
    if not trials_when_spent(ctx):
        return []
    got = offline.propose(ctx, seen.table, seen.metrics, max(1, ctx.cfg.evolve.max_trials), exclude,
                          judgeable_by_trial(ctx, spent=True), screen)
    for c in got:
        c.evidence = Evidence.TRIAL
    return got


def left_for_trial(ctx: EvolveContext) -> list[str]:
    """Names of the knobs a spent round left out for want of a trial; none where the spent round
    itself offered them (`spent_round`)."""
    if trials_when_spent(ctx):
        return []
    return [k.name for k in offline.judgeable_knobs(ctx, judgeable_by_trial(ctx))[1]]


# ---------------------------------------------------------------- second and later looks

def second_looks(ctx: EvolveContext) -> list[Candidate]:
    """Inconclusive replays worth one more look, oldest first: built on the active harness, not
    looked at again yet, and the replay would now read at least LOOK_GROWTH times the rollouts it
    read then (early in a run the window is short, and a change whose interval barely missed
    `min_gain` may clear it over the rollouts of a few more steps). The look spends half the
    error rate (`backtest`): two looks, at alpha and alpha/2, keep a false pass under 1.5 alpha."""
    store, cfg = ctx.store, ctx.cfg
    sizes = store.replay_sizes()
    rows_now = min(cfg.evolve.replay_max_rows, store.count("rollouts"))
    ivs = store.interventions()
    looked = {look_of(r) for r in ivs}
    return [_look_again(ctx, r, r.code) for r in ivs
            if r.status == "inconclusive" and r.kind not in FRESH_KINDS and r.parent_version == ctx.harness_version
            and r.id not in looked and not look_of(r) and r.id in sizes
            and rows_now >= LOOK_GROWTH * sizes[r.id]]


def search_memory_of(ctx: EvolveContext) -> memory.SearchMemory:
    """The run's search memory; an empty one, which holds nothing, with `evolve.search_memory` off."""
    return memory.load(ctx.store) if ctx.cfg.evolve.search_memory else memory.SearchMemory()


def later_looks(ctx: EvolveContext, n: int, mem: memory.SearchMemory | None = None) -> list[Candidate]:
    """Up to `n` inconclusive candidates worth one more look on today's policy, oldest first: decided
    at least LATER_LOOK_ROUNDS rounds ago, not looked at again yet, and re-applied onto the active
    harness. For a round that would otherwise leave slots empty: the policy has moved on since, so
    what a change does to its rollouts may have too; where the search memory (`mem`, else read from
    the store) has its try, only once the policy has changed measurably since. Like a second look,
    the look spends half the error rate. Candidates left inconclusive for want of a trial are left
    out: another look without one would end the same way."""
    store = ctx.store
    mem = mem or search_memory_of(ctx)
    rounds = store.round_ids()
    ivs = store.interventions()
    looked = {look_of(r) for r in ivs}
    out: list[Candidate] = []
    for r in ivs:
        if len(out) >= n:
            break
        if (r.status != "inconclusive" or r.id in looked or look_of(r) or r.round_id is None
                or len(r.names) != 1 or sum(1 for rid in rounds if rid > r.round_id) < LATER_LOOK_ROUNDS
                or _left_for_a_trial(ctx, r) or mem.unchanged_since(r.id)):
            continue
        try:
            code = r.code if r.parent_version == ctx.harness_version else iv.rebased_code(store, r, ctx.harness.code)
        except EditError:
            continue  # the active harness changed the same name: not the same change any more
        out.append(_look_again(ctx, r, code))
    return out


def _left_for_a_trial(ctx: EvolveContext, r: Intervention) -> bool:
    """Its last judgement was a probe that generated nothing: only a trial could judge it (`backtest`)."""
    bt = ctx.store.latest_backtest(r.id)
    return bt is not None and bt.mode == "probe" and bt.n_rollouts == 0 and bt.verdict == "inconclusive"


def _look_again(ctx: EvolveContext, r: Intervention, code: str) -> Candidate:
    """Intervention `r` as a new candidate on the active harness (`code`: its change there), a look at
    `r` that keeps its marks (a spent round's move is trialled again)."""
    return Candidate(title=r.title, code=code, parent_version=ctx.harness_version, parent_code=ctx.harness.code,
                     proposer=r.proposer, kind=r.kind, target=r.target, hypothesis=r.hypothesis,
                     expected=r.expected, skills=list(r.skills),
                     params={k: v for k, v in r.params.items() if k not in (SECOND_LOOK, WAIVED, SPENT_TRIAL)},
                     look_of=r.id, waived=bool(r.params.get(WAIVED)),
                     evidence=Evidence.TRIAL if r.params.get(SPENT_TRIAL) else None)


# ---------------------------------------------------------------- no churn

def _diagnostics(code: str) -> set[str]:
    import ast

    try:
        tree = ast.parse(code or "")
    except (SyntaxError, ValueError, RecursionError):
        return set()
    return {s.name[len("diagnose_"):] for s in tree.body
            if isinstance(s, ast.FunctionDef) and s.name.startswith("diagnose_")}


class Rules:
    """The churn rules for one round, from what the run has done so far."""

    def __init__(self, ctx: EvolveContext) -> None:
        store, cfg = ctx.store, ctx.cfg.evolve
        self.active_code = ctx.harness.code
        self.active = normalise(ctx.harness.code)
        self.versions: dict[str, int] = {}
        for v in store.harness_versions():
            self.versions.setdefault(normalise(v["code"]), v["id"])
        self.tried: dict[str, int] = {}
        self.promoted: dict[tuple[Any, ...], int] = {}
        self.retired: dict[str, int] = {}
        streaks: dict[str, list[Any]] = {}
        for r in store.interventions():
            if r.code:
                self.tried.setdefault(normalise(r.code), r.id)
            if r.status in ("promoted", "rolled_back"):
                for name in r.names:
                    ch = change_of(r.code, name)
                    self.promoted.setdefault(ch, r.id)
                    if r.status == "promoted" and ch[1] == REMOVED and name.startswith("diagnose_"):
                        self.retired[name[len("diagnose_"):]] = r.id
            key = kind_key(r.kind, r.params)
            if r.status in BAD and r.round_id is not None:
                streaks.setdefault(key, []).append(r.round_id)
            elif r.status in GOOD:
                streaks[key] = []
        rounds = store.round_ids()
        self.cooling = {}
        for key, fails in streaks.items():
            if len(fails) >= cfg.cooldown_after:
                since = sum(1 for rid in rounds if rid > fails[-1])
                if since <= cfg.cooldown_rounds:
                    self.cooling[key] = (len(fails), cfg.cooldown_rounds - since + 1)
        self.memory = search_memory_of(ctx)
        """What each knob and family was tried at and returned (`search_memory`): holds repeats."""
        self.skipped: list[Skip] = []
        self.waived: Callable[[Candidate], str | None] = functools.partial(self.reason, waive_cooldown=True)
        """`reason` with the cooldown waived (the proposer's screen for slots left empty)."""

    def reason(self, c: Candidate, waive_cooldown: bool = False) -> str | None:
        """Why `c` must not be backtested (None: it may go on). Refusals are recorded once.
        `waive_cooldown`: for slots no other candidate would fill; a candidate that goes on only so
        is marked `waived`, so the round's screen lets it through too, and its cooldown refusal
        leaves `skipped`."""
        names: list[str] = []  # the top-level names `c` changes; none for a broken proposal
        if not c.error and c.code:
            try:
                names = changed_names(c.parent_code, c.code)
            except EditError:
                pass
        changes = [change_of(c.code, name) for name in names]
        key = memory.key_of(c, changes)
        why = self._why(c, changes, key, waived=waive_cooldown or c.waived)
        if why:
            entry = Skip(c.title, key.family, c.proposer, why)
            if entry not in self.skipped:
                self.skipped.append(entry)
        elif waive_cooldown:
            c.waived = True
            self.skipped = [e for e in self.skipped if not (e.title == c.title and e.key == key.family
                                                            and e.reason.startswith("cooldown:"))]
        return why

    def _why(self, c: Candidate, changes: list[tuple[str, str]], key: memory.MoveKey,
             waived: bool = False) -> str | None:
        """The first churn rule `c` breaks (`changes`: `change_of` each name it changes; `key`: its
        change kind and move), or None."""
        if c.error or not c.code:
            return None  # a broken proposal is stored as failed; that is its own record
        norm = normalise(c.code)
        if norm == self.active:
            return "same code as the active harness"
        if norm in self.versions:
            return f"same code as harness v{self.versions[norm]}"
        if norm in self.tried and not c.look_of:
            return f"same code as intervention #{self.tried[norm]}, already tried"
        for ch in changes:
            if ch in self.promoted:
                return f"the same change to {ch[0]} was promoted before (#{self.promoted[ch]})"
        return self._retired(c) or self._held(c, key) or self._cooling(c, key.family, waived)

    def _retired(self, c: Candidate) -> str | None:
        # what the change itself brings back, against its own parent: a candidate built on an older
        # frontier member still carries that member's retired diagnostics, but a promotion re-applies
        # only its factor onto the active harness (`rebased_code`), so they never return through it
        back = (_diagnostics(c.code) - _diagnostics(c.parent_code or self.active_code)) & set(self.retired)
        for label in sorted(back):
            fresh = c.proposer == "revision" and c.params.get("op") == "add" \
                and c.params.get("name") == f"diagnose_{label}"
            if not fresh:
                return Refusal(f"diagnostic '{label}' was retired by #{self.retired[label]}; no new evidence "
                               "names it", whole_option=True)
        return None

    def _held(self, c: Candidate, key: memory.MoveKey) -> str | None:
        # a look is a second judgement of one move, chosen where looks are (`later_looks`)
        hold = None if c.look_of else self.memory.hold(key)
        return Refusal(hold.text(), whole_option=not hold.key.move) if hold else None

    def _cooling(self, c: Candidate, key: str, waived: bool) -> str | None:
        if key in self.cooling and not waived and not c.look_of:
            streak, left = self.cooling[key]
            return Refusal(f"cooldown: {key} failed or was inconclusive {streak} times in a row "
                           f"({left} more round(s))", whole_option=True)
        return None

    def screen(self, cands: list[Candidate]) -> list[Candidate]:
        """The candidates that may go on (the others land in `skipped`)."""
        return [c for c in cands if self.reason(c) is None]
