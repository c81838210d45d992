"""Interventions: single-factor harness changes with a hypothesis and a lifecycle.

    proposed -> backtesting -> passed -> approved -> promoted -> rolled_back
                 |             |  \\-> vetoed        \\-> (promoted stays)
                 |             \\-> promoted (auto mode)
                 |-> inconclusive -> approved (only explicitly) | vetoed
                 \\-> failed

A passed or inconclusive candidate whose base is no longer the active version
goes back to `backtesting` when it is rebased (`gate.rebase_onto_active`), or
to `failed` when its change does not apply to the active version.

`inconclusive`: the backtest found no harm, but the effect's 95% interval
does not clear `evolve.min_gain` (see `stats.decide`). It is not `failed`:
the operator sees it, and may approve it, but only explicitly
(`evotui approve RUN ID --inconclusive`, or `A` in the TUI); auto mode never
promotes it.

Every transition is appended to `history_json` with its reason, so the
lineage of a harness version reads as a log of decisions. A proposal that
never became a candidate (a malformed LLM answer, a diff that does not apply)
is stored too, straight to `failed`: a bad proposal is data, not a crash.

A candidate is screened before its backtest: `record` fails one that is not a
single-factor change or that the harness check refuses, and the churn rules
drop one that repeats what the run has done.

**No churn**: which candidates a round does not backtest again, and why (`Rules`; the rules
live here only).

- **same code**: a candidate whose normalised code (`ast.unparse(ast.parse(code))`,
  so comments and layout do not count) equals the active harness, any earlier
  harness version, or any candidate this run already proposed.
- **same change**: a change this run already promoted (promoted, or promoted
  and rolled back): the same top-level name with the same normalised
  definition (or removed again). Re-applying what a branch reverted is churn.
- **retired stays retired**: a diagnostic that a promotion retired comes back
  only with new evidence: a revision candidate that names it from the current
  window's unlabeled failures (its own label share). A candidate branched from
  an older version that still defines it is dropped.
- **cooldown**: a change kind (its template id, else `kind:name`) whose last
  `evolve.cooldown_after` decisions were all failed or inconclusive is not
  proposed for `evolve.cooldown_rounds` rounds after the last of them, unless
  the round would otherwise stay empty: then the proposer may fill the empty
  slots from kinds that are cooling down (`waived` below), since a round with
  untried moves left should try some (issue 16).

`Rules(ctx)` reads the run once per round; `rules.reason(candidate)` is None
for a candidate that may go on, else why not. Every refusal is kept in
`rules.skipped` (the round stores and logs them).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TYPE_CHECKING

from backend.harness.loader import MAX_BYTES, HarnessError, check_source
from backend.store import Store, loads, now
from backend.types import Intervention, JSON

from .edit import EditError, changed_names, definition, reapply, unified_diff


if TYPE_CHECKING:
    from .context import EvolveContext


TRANSITIONS = {
    "proposed": {"backtesting", "failed", "vetoed"},
    "backtesting": {"passed", "inconclusive", "failed"},
    "passed": {"approved", "vetoed", "promoted", "failed", "backtesting"},
    "inconclusive": {"approved", "vetoed", "failed", "backtesting"},
    "approved": {"promoted", "failed"},
    "promoted": {"rolled_back"},
    "failed": set(), "vetoed": set(), "rolled_back": set(),
}

# Which kind of change a top-level name is. Replay over stored rollouts judges all kinds except
# FRESH_KINDS, which need fresh rollouts: a prompt, sampling or curriculum change shows only in
# new generations (a probe), and sampling, curriculum and advantage changes only in training
# (a trial: `backtest.needs_trial`).
NAME_KINDS = {
    "PROMPT": "prompt", "SAMPLING": "sampling", "CURRICULUM": "curriculum",
    "ADVANTAGE": "advantage", "FILTERS": "filter", "REWARD_WEIGHTS": "reward", "VALIDITY": "diagnostic",
}
FRESH_KINDS = {"prompt", "sampling", "curriculum", "advantage"}


class LifecycleError(ValueError):
    """A transition the lifecycle does not allow (e.g. approving a failed candidate)."""


def kind_of(name: str) -> str:
    if name in NAME_KINDS:
        return NAME_KINDS[name]
    if name.startswith("diagnose_"):
        return "diagnostic"
    return "reward"  # reward_* and the helpers they call (extract_answer, ...)


@dataclass
class Candidate:
    """A proposed harness change before it is stored. `error` set = a failed proposal."""

    title: str
    code: str
    parent_version: int
    parent_code: str
    proposer: str
    kind: str = ""
    target: str = ""
    hypothesis: str = ""
    expected: str = ""
    skills: list[str] = field(default_factory=list)
    params: JSON = field(default_factory=dict)
    error: str | None = None

    def names(self) -> list[str]:
        return changed_names(self.parent_code, self.code) if not self.error else []

    def diff(self) -> str:
        if not self.code:
            return ""
        return unified_diff(self.parent_code, self.code, f"a/harness_v{self.parent_version}.py", "b/candidate.py")


def _storable(text: str) -> Any:
    """SQLite stores UTF-8: a lone surrogate (JSON allows one) would make the insert raise."""
    return text.encode("utf-8", "replace").decode("utf-8") if isinstance(text, str) else text


def _screen(c: Candidate) -> list[str]:
    """Set `c.error` for a candidate that must not reach a backtest; returns its changed names.
    Cheap, and before any of its code runs: a forbidden import or name never reaches the sandbox."""
    code = _storable(c.code or "")
    if code != (c.code or ""):
        c.code, c.error = code, c.error or "candidate is not valid UTF-8 text"
    if len(code.encode()) > MAX_BYTES:  # first, and kept short: diffing megabytes would stall the engine
        c.code = code[:MAX_BYTES]
        c.error = c.error or f"harness check rejected the change: harness is {len(code.encode())} bytes; " \
                             f"the limit is {MAX_BYTES}"
        return []
    try:
        names = c.names()
    except EditError as e:  # candidate code that does not even parse
        names, c.error = [], c.error or f"candidate does not parse: {e}"
    if not c.error and len(names) != 1:
        c.error = f"not a single-factor change: touches {', '.join(names) or 'nothing'}"
    if not c.error:
        try:
            check_source(c.code)
        except HarnessError as e:
            c.error = f"harness check rejected the change: {e}"
    return names


def record(store: Store, round_id: int | None, c: Candidate) -> int:
    """Store a candidate as a `proposed` intervention (or `failed` when it has an error)."""
    names = _screen(c)
    history = [{"ts": now(), "from": None, "to": "proposed", "reason": f"proposed by {c.proposer}"}]
    iid = store.add_intervention(
        round_id=round_id, kind=c.kind or (kind_of(names[0]) if names else ""), target=_storable(c.target),
        title=_storable(c.title), hypothesis=_storable(c.hypothesis), expected=_storable(c.expected),
        diff=c.diff(), code=c.code or "", parent_version=c.parent_version, proposer=c.proposer,
        skills=c.skills, params=dict(c.params, names=names), history=history)
    if c.error:
        transition(store, iid, "failed", c.error)
    return iid


def get(store: Store, iid: int) -> Intervention:
    """The intervention `iid`; LifecycleError when the run has none."""
    row = store.intervention(iid)
    if row is None:
        raise LifecycleError(f"no intervention #{iid}")
    return row


def transition(store: Store, iid: int, to: str, reason: str, **data: Any) -> Intervention:
    """Move an intervention to `to`, appending the reason (and any data) to its history."""
    row = get(store, iid)
    if to not in TRANSITIONS.get(row.status, set()):
        raise LifecycleError(f"intervention #{iid} is {row.status}; it cannot become {to}")
    history = [*row.history, dict({"ts": now(), "from": row.status, "to": to, "reason": reason}, **data)]
    store.set_intervention_status(iid, to, reason, history)
    return get(store, iid)


def params(row: Intervention | JSON) -> JSON:
    """The proposer's parameters of a record, or of a raw `interventions` row."""
    if isinstance(row, Intervention):
        return row.params
    return loads(row.get("params_json"), {}) or {}


def set_params(store: Store, iid: int, **values: Any) -> None:
    store.set_intervention_params(iid, dict(get(store, iid).params, **values))


SECOND_LOOK = "second_look_of"
"""Candidate param: the inconclusive intervention this candidate replays again (`second_looks`)."""
LOOK_GROWTH = 1.5
"""A second look needs at least this many times the rollouts the first replay read."""


def second_looks(ctx: EvolveContext) -> list[Candidate]:
    """Inconclusive replays worth one more look, oldest first: built on the active harness,
    not looked at again yet, and the replay would now read at least LOOK_GROWTH times the
    rollouts it read then (early in a run the window is short: lenient extraction read 320
    groups at step 5 on 2 x H100, +0.030 [+0.018, +0.043], and was never replayed again,
    although the run had 1,024 groups to show by step 15). The second look spends half the
    error rate (`backtest._replay_all`): two looks, at alpha and alpha/2, keep a false pass
    under 1.5 alpha."""
    store, cfg = ctx.store, ctx.cfg
    sizes = store.replay_sizes()
    rows_now = min(cfg.evolve.replay_max_rows, ctx.step * cfg.train.tasks_per_step * cfg.train.group_size)
    ivs = store.interventions()
    looked = {r.params.get(SECOND_LOOK) for r in ivs}
    return [_look_again(ctx, r, r.code) for r in ivs
            if r.status == "inconclusive" and r.kind not in FRESH_KINDS and r.parent_version == ctx.harness_version
            and r.id not in looked and not r.params.get(SECOND_LOOK) and r.id in sizes
            and rows_now >= LOOK_GROWTH * sizes[r.id]]


def _look_again(ctx: EvolveContext, r: Intervention, code: str) -> Candidate:
    """Intervention `r` as a new candidate on the active harness (`code`: its change there),
    marked as a look at `r` (SECOND_LOOK)."""
    return Candidate(title=r.title, code=code, parent_version=ctx.harness_version, parent_code=ctx.harness.code,
                     proposer=r.proposer, kind=r.kind, target=r.target, hypothesis=r.hypothesis,
                     expected=r.expected, skills=list(r.skills), params=dict(r.params, **{SECOND_LOOK: r.id}))


def rebased_code(store: Store, r: Intervention, onto: str) -> str:
    """`r`'s single-factor change re-applied onto the harness code `onto` (`edit.reapply`).
    EditError when it is not one recorded name, or `onto` changed that name too."""
    names = r.names
    base = store.harness_version(r.parent_version) if r.parent_version is not None else None
    if len(names) != 1 or base is None:
        raise EditError(f"its change ({', '.join(names) or 'unknown'}) is not one recorded name")
    return reapply(base["code"], r.code, onto, names[0])


LATER_LOOK_ROUNDS = 10
"""Rounds after its decision before an inconclusive candidate may be looked at once more (`later_looks`)."""
NEEDS_TRIAL = "it needs a trial"
"""In the reason of a candidate left inconclusive because only a trial could judge it (`backtest`)."""
SPENT_TRIAL = "spent_round_trial"
"""Candidate param: proposed by a spent round under `evolve.trials = "spent"`, the only kind of
candidate such a run trials (`backtest.may_trial`, `offline.propose_for_spent_round`)."""


def trials_when_spent(ctx: EvolveContext) -> bool:
    """`evolve.trials = "spent"` in a run that can trial: only a spent round offers moves that need
    a trial (`offline.propose_for_spent_round`), and only those are trialled (`backtest.may_trial`)."""
    return ctx.cfg.evolve.trials == "spent" and ctx.policy is not None and ctx.policy.trials


def later_looks(ctx: EvolveContext, n: int) -> list[Candidate]:
    """Up to `n` inconclusive candidates worth one more look on today's policy, oldest first: decided
    at least LATER_LOOK_ROUNDS rounds ago, not looked at again yet, and re-applied onto the active
    harness. For a round that would otherwise leave slots empty: the policy has moved on since, so
    what a change does to its rollouts may have too (the seeds' premise: improvements keep showing
    up while the policy changes). A 200-step run from the expert harness had tried every move the
    gate could judge by round 25 (4 x H200, session 8). Like a second look, the look spends half the
    error rate (`backtest`): two looks, at alpha and alpha/2, keep a false pass under 1.5 alpha.
    Candidates only a trial can judge are left out where they were left for want of one."""
    store = ctx.store
    rounds = store.round_ids()
    ivs = store.interventions()
    looked = {r.params.get(SECOND_LOOK) for r in ivs}
    out: list[Candidate] = []
    for r in ivs:
        if len(out) >= n:
            break
        if (r.status != "inconclusive" or r.id in looked or r.params.get(SECOND_LOOK) or r.round_id is None
                or NEEDS_TRIAL in (r.reason or "") or len(r.names) != 1
                or sum(1 for rid in rounds if rid > r.round_id) < LATER_LOOK_ROUNDS):
            continue
        try:
            code = r.code if r.parent_version == ctx.harness_version else rebased_code(store, r, ctx.harness.code)
        except EditError:
            continue  # the active harness changed the same name: not the same change any more
        out.append(_look_again(ctx, r, code))
    return out


def known_codes(store: Store) -> set[str]:
    """Code of every candidate this run has already proposed (so it is not proposed twice)."""
    return store.known_codes()


def passed(store: Store) -> list[Intervention]:
    """Candidates waiting for a decision, best first."""
    return store.waiting_interventions()


# ---------------------------------------------------------------- no churn

BAD = ("failed", "inconclusive")
GOOD = ("passed", "approved", "promoted", "rolled_back")
REMOVED = "<removed>"


@lru_cache(maxsize=4096)  # a round re-reads every version and candidate of the run
def normalise(code: str) -> str:
    """Code with comments, blank lines and layout ironed out (unparsable code stays as it is)."""
    try:
        return ast.unparse(ast.parse(code or ""))
    except (SyntaxError, ValueError, RecursionError):
        return code or ""


def change_of(code: str, name: str) -> tuple[str, str]:
    """(name, normalised definition) of one top-level name in `code`; REMOVED when it is absent."""
    try:
        src = definition(code, name)
    except EditError:
        src = None
    return name, REMOVED if src is None else normalise(src)


def kind_key(kind: str, p: JSON) -> str:
    """The change kind cooldowns count: the template id, else kind:name."""
    names = p.get("names") or ([p["name"]] if p.get("name") else [])
    return p.get("template") or f"{kind}:{names[0] if names else '?'}"


def _diagnostics(code: str) -> set[str]:
    try:
        tree = ast.parse(code or "")
    except (SyntaxError, ValueError, RecursionError):
        return set()
    return {s.name[len("diagnose_"):] for s in tree.body
            if isinstance(s, ast.FunctionDef) and s.name.startswith("diagnose_")}


def _names(c: Candidate) -> list[str]:
    try:
        return c.names()
    except EditError:
        return []  # not parsable: recording it fails it with that reason


class Refusal(str):
    """A churn rule's reason to refuse a candidate. `whole_option`: it holds for every draw of the
    option the candidate came from (a knob's cooldown counts per knob; every draw of a snippet adds
    the same diagnostic), so a proposer stops drawing from that option rather than screening, and
    recording, each of its values in turn."""

    whole_option: bool

    def __new__(cls, text: str, whole_option: bool = False) -> "Refusal":
        self = super().__new__(cls, text)
        self.whole_option = whole_option
        return self


WAIVED = "cooldown_waived"
"""Param set on a candidate that took a slot only because nothing else would (see `Rules.waived`)."""


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
        self.skipped: list[JSON] = []

    def reason(self, c: Candidate, waive_cooldown: bool = False) -> str | None:
        """Why `c` must not be backtested (None: it may go on). Refusals are recorded once.
        `waive_cooldown`: for slots no other candidate would fill; a candidate that goes on only so
        is marked, so the round's screen lets it through too, and its cooldown refusal leaves `skipped`."""
        why = self._why(c, waived=waive_cooldown or bool(c.params.get(WAIVED)))
        key = self._key(c, _names(c)) if why or waive_cooldown else ""
        if why:
            entry = {"title": c.title, "key": key, "proposer": c.proposer, "reason": why}
            if entry not in self.skipped:
                self.skipped.append(entry)
        elif waive_cooldown:
            c.params[WAIVED] = True
            self.skipped = [e for e in self.skipped if not (e["title"] == c.title and e["key"] == key
                                                            and e["reason"].startswith("cooldown:"))]
        return why

    def waived(self, c: Candidate) -> str | None:
        """`reason` with the cooldown waived (the proposer's screen for slots left empty)."""
        return self.reason(c, waive_cooldown=True)

    def _why(self, c: Candidate, waived: bool = False) -> str | None:
        if c.error or not c.code:
            return None  # a broken proposal is stored as failed; that is its own record
        norm = normalise(c.code)
        if norm == self.active:
            return "same code as the active harness"
        if norm in self.versions:
            return f"same code as harness v{self.versions[norm]}"
        if norm in self.tried and not c.params.get(SECOND_LOOK):
            return f"same code as intervention #{self.tried[norm]}, already tried"
        names = _names(c)
        for name in names:
            ch = change_of(c.code, name)
            if ch in self.promoted:
                return f"the same change to {name} was promoted before (#{self.promoted[ch]})"
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
        key = self._key(c, names)
        if key in self.cooling and not waived and not c.params.get(SECOND_LOOK):
            streak, left = self.cooling[key]
            return Refusal(f"cooldown: {key} failed or was inconclusive {streak} times in a row "
                           f"({left} more round(s))", whole_option=True)
        return None

    @staticmethod
    def _key(c: Candidate, names: list[str]) -> str:
        return kind_key(c.kind or (kind_of(names[0]) if names else ""), dict(c.params, names=names))

    def screen(self, cands: list[Candidate]) -> list[Candidate]:
        """The candidates that may go on (the others land in `skipped`)."""
        return [c for c in cands if self.reason(c) is None]
