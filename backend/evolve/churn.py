"""No churn: which candidates a round does not backtest again, and why. The rules live here only.

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
  proposed for `evolve.cooldown_rounds` rounds after the last of them.

`Rules(ctx)` reads the run once per round; `rules.reason(candidate)` is None
for a candidate that may go on, else why not. Every refusal is kept in
`rules.skipped` (the round stores and logs them).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any, TYPE_CHECKING

from backend.types import JSON

from .edit import EditError, definition
from .interventions import Candidate, kind_of


if TYPE_CHECKING:
    from .context import EvolveContext

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

    def reason(self, c: Candidate) -> str | None:
        """Why `c` must not be backtested (None: it may go on). Refusals are recorded once."""
        why = self._why(c)
        if why:
            entry = {"title": c.title, "key": self._key(c, _names(c)), "proposer": c.proposer, "reason": why}
            if entry not in self.skipped:
                self.skipped.append(entry)
        return why

    def _why(self, c: Candidate) -> str | None:
        if c.error or not c.code:
            return None  # a broken proposal is stored as failed; that is its own record
        norm = normalise(c.code)
        if norm == self.active:
            return "same code as the active harness"
        if norm in self.versions:
            return f"same code as harness v{self.versions[norm]}"
        if norm in self.tried:
            return f"same code as intervention #{self.tried[norm]}, already tried"
        names = _names(c)
        for name in names:
            ch = change_of(c.code, name)
            if ch in self.promoted:
                return f"the same change to {name} was promoted before (#{self.promoted[ch]})"
        back = (_diagnostics(c.code) - _diagnostics(self.active_code)) & set(self.retired)
        for label in sorted(back):
            fresh = c.proposer == "revision" and c.params.get("op") == "add" \
                and c.params.get("name") == f"diagnose_{label}"
            if not fresh:
                return f"diagnostic '{label}' was retired by #{self.retired[label]}; no new evidence names it"
        key = self._key(c, names)
        if key in self.cooling:
            streak, left = self.cooling[key]
            return f"cooldown: {key} failed or was inconclusive {streak} times in a row ({left} more round(s))"
        return None

    @staticmethod
    def _key(c: Candidate, names: list[str]) -> str:
        return kind_key(c.kind or (kind_of(names[0]) if names else ""), dict(c.params, names=names))

    def screen(self, cands: list[Candidate]) -> list[Candidate]:
        """The candidates that may go on (the others land in `skipped`)."""
        return [c for c in cands if self.reason(c) is None]
