"""The search's memory: what each knob and change family was tried at, what it cost, what it
returned, and which moves the round holds back until the policy has changed measurably.

    memory = load(store)                          # read from the store; nothing kept in between
    memory.hold(key_of(candidate, names))         # a Hold (why it is not drawn now), or None
    tally(memory)                                 # [FamilyTally]: per knob or family, cost and return

Everything is read from what the store already holds (interventions, backtests, rounds,
validation evaluations), so a resumed run, `evotui report` and the live round see the same memory.

**A try** is an intervention the gate judged (it has a backtest). Its **family** is its change
kind, the key the cooldown counts too (`interventions.kind_key`): `space:<knob>` for a move in the
search space (`PROMPT.system` choices are one family), the template id for a snippet or a skill
made from one, `kind:name` for an LLM's edit. Its **move** is what it changes inside the family:
a knob's (from, to), else the normalised definition of the one name it changes. Its **time**: the
step of its round, the policy version saved by then, and the validation evaluation in force (the
newest before that step: a round runs before its step's evaluation).

**What it returned**: its latest backtest's verdict, passed, failed or inconclusive, where an
inconclusive move that the gate saw change nothing (`space.changed_nothing`: the update unchanged,
or a replayed interval within 0.001 of 0) counts as *changed nothing*, not inconclusive.

**What it cost**: replay rows (stored rollouts re-scored; nothing generated) and probe and trial
rollouts: the candidate's arm, plus an equal share of the incumbent arm that the candidates of
its round and mode shared (`budget.py` counts that arm once a round). The rollouts of all tries
add up to the search budget's probe and trial rollouts.

**The policy has changed measurably** since a try when the newest validation evaluation differs
from the one in force at the try by a paired 95% interval that excludes 0 (`stats.paired_binary`
over the validation problems both hold: McNemar's pairs, Newcombe's interval). Where the two share
no problem, when the newest accuracy lies outside the older one's Wilson 95% interval. No
evaluation since the try: not changed. A try before the first evaluation is measured from it.

**Held** (`hold`): a move whose last try was inconclusive or changed nothing, and a whole family
whose last FAMILY_TRIES tries were, are not drawn again until the policy has changed measurably
since that last try. A try that read and generated nothing (left for want of a trial) returned no
evidence and holds nothing; a try outside a round (an operator's edit) is counted, never held
against the search. The round applies holds in one place, `schedule.Rules`; its refusals carry
HELD_PREFIX, so the report counts them from the rounds' skipped lists.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Mapping

from backend.store import loads
from backend.types import Backtest, Intervention

from .interventions import Candidate, change_of, kind_key, kind_of
from .records import HELD_PREFIX as HELD_PREFIX  # re-exported: the search report strips it
from .budget import SCORED_ONLY
from .space import PREFIX, changed_nothing
from .stats import pair_up, paired_binary, wilson_interval

if TYPE_CHECKING:
    from backend.store import Store


FAMILY_TRIES = 2
"""A family whose last this many tries were all inconclusive or changed nothing is held whole."""


class Outcome(str, Enum):
    """What a try returned (its latest backtest's verdict)."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    NOTHING = "changed nothing"


HOLDING = (Outcome.INCONCLUSIVE, Outcome.NOTHING)
"""Outcomes that hold a move (or, FAMILY_TRIES in a row, a family) until the policy changes."""


@dataclass(frozen=True)
class Validation:
    """One validation evaluation: its accuracy with the Wilson 95% interval, and per problem."""

    step: int
    accuracy: float
    n: int
    ci_low: float
    ci_high: float
    outcomes: Mapping[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def text(self) -> str:
        """`0.281 [0.201, 0.378], n 96, step 40`."""
        return f"{self.accuracy:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}], n {self.n}, step {self.step}"


@dataclass(frozen=True)
class Cost:
    """What a try cost: rows its replays re-scored, and rollouts its probes and trials generated."""

    replay_rows: int = 0
    probe_rollouts: float = 0.0
    trial_rollouts: float = 0.0

    @property
    def rollouts(self) -> float:
        """Rollouts generated with the policy (probes and trials, with the incumbent arm's share)."""
        return self.probe_rollouts + self.trial_rollouts


@dataclass(frozen=True)
class MoveKey:
    """Which family a change belongs to, and which move of it it is ("" when not known)."""

    family: str
    move: str = ""


@dataclass(frozen=True)
class Try:
    """One judged intervention, as the memory keeps it."""

    id: int
    key: MoveKey
    title: str
    round_id: int | None
    step: int | None
    """The step of its round (None outside a round)."""
    policy_version: int | None
    validation: Validation | None
    """The validation evaluation in force when it was tried."""
    cost: Cost
    outcome: Outcome
    promoted: bool
    """Promoted (and possibly rolled back since)."""
    evidence: bool
    """Its backtests read or generated rollouts (a try left for want of a trial did not)."""
    changed_since: bool
    """The policy has changed measurably since (as of the memory's newest evaluation)."""


@dataclass(frozen=True)
class Hold:
    """A move, or a whole family (`key.move` ""), held back until the policy changes measurably."""

    key: MoveKey
    tries: tuple[Try, ...]
    """The tries that hold it, oldest first."""
    now: Validation | None

    def text(self) -> str:
        """The refusal a round records (it starts with HELD_PREFIX)."""
        last = self.tries[-1]
        if self.key.move:
            what = f"'{last.title}' returned {last.outcome.value} (#{last.id})"
        else:
            outs = ", ".join(f"{t.outcome.value} (#{t.id})" for t in self.tries)
            what = f"{family_name(self.key.family)}'s last {len(self.tries)} tries returned {outs}, the last"
        then = last.validation.text() if last.validation else "none yet"
        now = self.now.text() if self.now else "none yet"
        return (f"{HELD_PREFIX}{what} at step {last.step}, validation then {then}; held until validation moves "
                f"beyond its 95% interval (now {now})")


@dataclass(frozen=True)
class MemorySkip:
    """A draw the memory refused in a round (a `rounds` row's skipped list), as the report counts it."""

    step: int
    family: str
    title: str
    reason: str


@dataclass(frozen=True)
class SearchMemory:
    """The run's tries, its validation evaluations, what is held now, and what the memory skipped."""

    tries: tuple[Try, ...] = ()
    validation: tuple[Validation, ...] = ()
    family_holds: Mapping[str, Hold] = field(default_factory=dict)
    move_holds: Mapping[MoveKey, Hold] = field(default_factory=dict)
    skipped: tuple[MemorySkip, ...] = ()

    def hold(self, key: MoveKey) -> Hold | None:
        """Why the change `key` is not drawn now (its family's hold first), or None."""
        return self.family_holds.get(key.family) or self.move_holds.get(key)

    def unchanged_since(self, iid: int) -> bool:
        """Whether intervention `iid` was judged with evidence and the policy has not changed
        measurably since (False for one the memory has no try of)."""
        t = next((t for t in self.tries if t.id == iid), None)
        return t is not None and t.evidence and t.step is not None and not t.changed_since


@dataclass(frozen=True)
class FamilyTally:
    """One knob or family over the run: its tries, what they cost and what they returned."""

    family: str
    tries: int = 0
    replay_rows: int = 0
    rollouts: float = 0.0
    passed: int = 0
    inconclusive: int = 0
    nothing: int = 0
    failed: int = 0
    promoted: int = 0
    held: int = 0
    """Draws the memory refused (`MemorySkip`)."""


# ---------------------------------------------------------------- keys

def family_name(family: str) -> str:
    """A family as the report shows it: a knob's name without its `space:` prefix."""
    return family[len(PREFIX):] if family.startswith(PREFIX) else family


def key_of(c: Candidate, changes: list[tuple[str, str]]) -> MoveKey:
    """The family and move of candidate `c`; `changes`: `interventions.change_of` of each name it changes."""
    names = [name for name, _ in changes]
    family = kind_key(c.kind or (kind_of(names[0]) if names else ""), dict(c.params, names=names))
    return MoveKey(family, _move(c.params, changes))


def _row_key(r: Intervention) -> MoveKey:
    return MoveKey(kind_key(r.kind, r.params), _move(r.params, [change_of(r.code, n) for n in r.names if r.code]))


def _move(params: Mapping[str, object], changes: list[tuple[str, str]]) -> str:
    """A knob's (from, to), else the one changed name's normalised definition ("" for neither)."""
    if isinstance(params.get("knob"), str):
        return json.dumps([params.get("from"), params.get("to")], sort_keys=True, default=str)
    return changes[0][1] if len(changes) == 1 else ""


# ---------------------------------------------------------------- reading the store

def load(store: Store) -> SearchMemory:
    """The run's search memory, from the store alone."""
    vals = validations(store)
    changed = [moved(v, vals[-1]) for v in vals]  # since each evaluation: once, not once a try
    steps = store.round_steps()
    ivs, bts = store.interventions(), store.backtests()
    by_iv: dict[int, list[Backtest]] = {}
    for b in bts:
        by_iv.setdefault(b.intervention_id, []).append(b)
    costs = _costs(bts, {r.id: r.round_id for r in ivs})
    versions = _policy_versions(store, set(steps.values()))
    tries = []
    for r in ivs:
        if r.id not in by_iv:
            continue  # never judged: a broken proposal, or one still waiting
        step = steps.get(r.round_id) if r.round_id is not None else None
        i = reference(vals, step)
        judged = by_iv[r.id]
        tries.append(Try(r.id, _row_key(r), r.title, r.round_id, step, versions.get(step) if step is not None else None,
                         vals[i] if i is not None else None, costs.get(r.id, Cost()), _outcome(judged[-1]),
                         r.status in ("promoted", "rolled_back"), any(b.n_rollouts > 0 for b in judged),
                         i is not None and changed[i]))
    return SearchMemory(tuple(tries), vals, *holds(tries, vals[-1] if vals else None),
                        skipped=tuple(_memory_skips(store)))


def _policy_versions(store: Store, steps: set[int]) -> dict[int, int | None]:
    """{step: the policy version saved by then (None: the base model)}."""
    out: dict[int, int | None] = {}
    for step in steps:
        pv = store.policy_version_at(step)
        out[step] = pv["id"] if pv else None
    return out


def validations(store: Store) -> tuple[Validation, ...]:
    """The run's validation evaluations in order, each with its interval and per-problem outcomes."""
    out = []
    for row in store.evals("validation"):
        res = [x for x in loads(row["results_json"], []) or [] if isinstance(x, dict) and "task_id" in x]
        k = sum(bool(x.get("correct")) for x in res)
        lo, hi = wilson_interval(k, len(res))
        out.append(Validation(row["step"], float(row["accuracy"] or 0.0), len(res), lo, hi,
                              {str(x["task_id"]): bool(x.get("correct")) for x in res}))
    return tuple(out)


def _costs(backtests: list[Backtest], rounds: Mapping[int, int | None]) -> dict[int, Cost]:
    """{intervention id: its cost}. A round's probes (and trials) share one incumbent arm: as many
    rollouts as its largest candidate arm, split evenly over the candidates that generated any."""
    arms: dict[tuple[str, object], list[Backtest]] = {}
    for b in backtests:
        if b.mode not in SCORED_ONLY and b.n_rollouts > 0:
            rid = rounds.get(b.intervention_id)
            arms.setdefault((b.mode, rid if rid is not None else f"b{b.id}"), []).append(b)
    share = {b.id: max(x.n_rollouts for x in arm) / len(arm) for arm in arms.values() for b in arm}
    out: dict[int, Cost] = {}
    for b in backtests:
        c = out.get(b.intervention_id, Cost())
        gen = b.n_rollouts + share.get(b.id, 0.0) if b.mode not in SCORED_ONLY else 0.0
        out[b.intervention_id] = Cost(c.replay_rows + (b.n_rollouts if b.mode in SCORED_ONLY else 0),
                                      c.probe_rollouts + (gen if b.mode != "trial" else 0.0),
                                      c.trial_rollouts + (gen if b.mode == "trial" else 0.0))
    return out


def _outcome(b: Backtest) -> Outcome:
    if b.verdict == Outcome.PASSED.value:
        return Outcome.PASSED
    if b.verdict != Outcome.INCONCLUSIVE.value:
        return Outcome.FAILED  # any other verdict is no pass
    nothing = changed_nothing(b.verdict, {"mode": b.mode, "ci_low": b.ci_low, "ci_high": b.ci_high,
                                          "same_update": None if b.same_update is None else int(b.same_update)})
    return Outcome.NOTHING if nothing else Outcome.INCONCLUSIVE


def reference(vals: tuple[Validation, ...], step: int | None) -> int | None:
    """Which of `vals` was in force at a try of round step `step`: the newest before it, or the
    run's first when there was none yet (None: outside a round, or no evaluation at all)."""
    if step is None or not vals:
        return None
    before = [i for i, v in enumerate(vals) if v.step < step]
    return before[-1] if before else 0


def moved(then: Validation, now: Validation) -> bool:
    """Whether validation accuracy moved measurably from `then` to `now` (the module docstring)."""
    if now is then:
        return False
    old, new = pair_up(then.outcomes, now.outcomes)
    if old:
        e = paired_binary(old, new)
        return e.ci_low > 0 or e.ci_high < 0
    return not then.ci_low <= now.accuracy <= then.ci_high


def _memory_skips(store: Store) -> list[MemorySkip]:
    out = []
    for row in store.round_skips():
        for s in loads(row["skipped_json"], []) or []:
            if isinstance(s, dict) and str(s.get("reason", "")).startswith(HELD_PREFIX):
                out.append(MemorySkip(row["step"], str(s.get("key", "")), str(s.get("title", "")), str(s["reason"])))
    return out


# ---------------------------------------------------------------- holds and the tally

def holds(tries: list[Try], now: Validation | None) -> tuple[dict[str, Hold], dict[MoveKey, Hold]]:
    """({family: its hold}, {move: its hold}) from `tries` (oldest first): see the module docstring."""
    by_family: dict[str, list[Try]] = {}
    last_move: dict[MoveKey, Try] = {}
    for t in tries:
        if t.evidence and t.step is not None:
            by_family.setdefault(t.key.family, []).append(t)
            if t.key.move:
                last_move[t.key] = t
    families = {}
    for fam, ts in by_family.items():
        last = tuple(ts[-FAMILY_TRIES:])
        if len(last) == FAMILY_TRIES and all(t.outcome in HOLDING for t in last) and not last[-1].changed_since:
            families[fam] = Hold(MoveKey(fam), last, now)
    moves = {k: Hold(k, (t,), now) for k, t in last_move.items() if t.outcome in HOLDING and not t.changed_since}
    return families, moves


def tally(memory: SearchMemory) -> list[FamilyTally]:
    """Per knob or family, most rollouts first: tries, replay rows, rollouts, outcomes, promotions,
    and the draws the memory refused."""
    held = Counter(s.family for s in memory.skipped)
    rows: dict[str, FamilyTally] = {}
    for t in memory.tries:
        f = rows.get(t.key.family, FamilyTally(t.key.family))
        rows[t.key.family] = FamilyTally(
            f.family, f.tries + 1, f.replay_rows + t.cost.replay_rows, f.rollouts + t.cost.rollouts,
            f.passed + (t.outcome is Outcome.PASSED), f.inconclusive + (t.outcome is Outcome.INCONCLUSIVE),
            f.nothing + (t.outcome is Outcome.NOTHING), f.failed + (t.outcome is Outcome.FAILED),
            f.promoted + t.promoted)
    for fam, n in held.items():
        rows[fam] = dataclasses.replace(rows.get(fam, FamilyTally(fam)), held=n)
    return sorted(rows.values(), key=lambda f: (-f.rollouts, -f.tries, f.family))
