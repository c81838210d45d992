"""Interventions: single-factor harness changes with a hypothesis and a lifecycle.

    proposed -> backtesting -> passed -> approved -> promoted -> rolled_back
                 |             |  \\-> vetoed        \\-> (promoted stays)
                 |             \\-> promoted (auto mode)
                 |-> inconclusive -> approved (only explicitly) | vetoed
                 \\-> failed

A passed or inconclusive candidate whose base is no longer the active version
goes back to `backtesting` when it is rebased (`promotion.rebase`), or
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
single-factor change or that the harness check refuses. Which candidates a
round tries at all (slots, looks, waivers, spent rounds, trials, and the churn
rules that drop repeats) is decided in `schedule.py`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, Mapping, TypedDict, cast

from backend.harness.loader import MAX_BYTES, HarnessError, check_source
from backend.store import Store, loads, now
from backend.types import Intervention, JSON

from .edit import EditError, changed_names, definition, reapply, unified_diff


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


Params = TypedDict("Params", {
    "names": list[str], "op": str, "name": str, "template": str, "knob": str, "from": Any, "to": Any,
    "step": float | None, "match": float, "branch": dict[str, int], "diagnosis": str,
    "second_look_of": int, "cooldown_waived": bool, "spent_round_trial": bool}, total=False)
"""What a proposer records with a candidate (`params_json`): the top-level `names` it changes (set
by `record`), how (`op`, `name`), which option made it (`template`: a snippet's id or
`space:<knob>`), a knob move's `knob`, `from`, `to` and `step`, its rank score (`match`), the
frontier branch it was built on (`branch`: base and active version), the dead-group diagnosis
that motivated it (`diagnosis`) and the schedule's marks. Snippets and skills add their own drawn
parameters (a snippet's `partial`, a mutated skill's `mutated`); those stay plain values."""


class Evidence(str, Enum):
    """What judges a candidate: a replay over stored rollouts, a probe of fresh rollouts, or a
    paired trial of policy copies trained under each harness (`schedule.evidence`)."""

    REPLAY = "replay"
    PROBE = "probe"
    TRIAL = "trial"


@dataclass
class Candidate:
    """A proposed harness change before it is stored. `error` set = a failed proposal.
    The last three fields are the schedule's (`schedule.py`), which stores them with the record."""

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
    look_of: int | None = None
    """The inconclusive intervention this candidate looks at again (a second or later look)."""
    waived: bool = False
    """It took a slot only because nothing else would: its change kind's cooldown was waived."""
    evidence: Evidence | None = None
    """Evidence the proposer asked for: TRIAL for a spent round's move; None: as its kind needs."""

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


def params(row: Intervention | Mapping[str, object]) -> Params:
    """The proposer's parameters of a record, or of a raw `interventions` row (its `params_json`)."""
    if isinstance(row, Intervention):
        return cast(Params, row.params)
    raw = row.get("params_json")
    return cast(Params, loads(raw if isinstance(raw, str) else None, {}) or {})


def set_params(store: Store, iid: int, **values: Any) -> None:
    store.set_intervention_params(iid, dict(get(store, iid).params, **values))


def rebased_code(store: Store, r: Intervention, onto: str) -> str:
    """`r`'s single-factor change re-applied onto the harness code `onto` (`edit.reapply`).
    EditError when it is not one recorded name, or `onto` changed that name too."""
    names = r.names
    base = store.harness_version(r.parent_version) if r.parent_version is not None else None
    if len(names) != 1 or base is None:
        raise EditError(f"its change ({', '.join(names) or 'unknown'}) is not one recorded name")
    return reapply(base["code"], r.code, onto, names[0])


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


def kind_key(kind: str, p: Params | Mapping[str, object]) -> str:
    """The change kind cooldowns count: the template id, else kind:name (`p`: a candidate's params)."""
    template, names, name = p.get("template"), p.get("names"), p.get("name")
    if template:
        return str(template)
    first = names[0] if isinstance(names, list) and names else (name or "?")
    return f"{kind}:{first}"


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
