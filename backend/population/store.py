"""The population database: `POP/population.sqlite`, one per population of runs.

A population directory POP holds this database and its members `m0..m{N-1}`,
each a normal evotui run directory (its own `run.db`, checkpoints, harness).
This file records what only the population knows: who the members are, how
they scored at each comparison, and every copy and move between them with the
evidence that decided it. Migrations are append-only and applied on every open
(sqlite-utils, as the run store does); a database carrying a migration this
code does not know is refused. It is written through sqlite-utils' table API
only: the run store (`backend/store`) stays the one package with SQL text.

Tables (plural names; `*_json` hold JSON):

- populations (one row, id 1): id, created_at, updated_at, status
  ('created' | 'running' | 'stopped' | 'done' | 'failed'), size (members),
  every (steps between comparisons), mode ('explore' | 'copy'), steps_total,
  seed (the population's; member i trains with `member_seed(seed, i)`),
  auto_promote (1: explore moves apply at once; 0: they wait as 'pending'),
  step (the last step whose comparison and events are complete; 0 at start),
  error, config_json (the members' base run config, as stored in a run).
- members: idx (pk, 0..size-1), name ('m0'...), run_dir (relative to POP),
  seed, created_at.
- scores: one row per member per comparison. id, step, member, n (validation
  problems), correct, acc, best (1: the member the others were compared to),
  diff, low, high (paired difference member - best and its simultaneous 95%
  interval over the N - 1 comparisons, `scores.py`; over the same problems;
  0/0/0 for the best itself), behind (1: high < 0, "clearly
  behind"), eval_id (the member's `evals` row), created_at.
- events: one row per copy or move. id, step (the comparison that decided it),
  kind ('copy' | 'move'), member (the target), parent (the source member; a
  move's parent is the member it copied from at the same step), status:
    copy: 'planned' (recorded before any file moves; a resume re-applies it)
          -> 'applied' | 'failed'
    move: 'planned' -> 'applied' (autonomous) | 'pending' (supervised; the
          member trains on with its copied harness) -> 'approved' (operator)
          -> 'applied', or 'vetoed'; 'failed' (the gate or the copy broke).
  Evidence that decided it: diff, low, high, n (the target's paired interval
  against the best member), compared_json (the member indices compared),
  parent_score (the parent choice's score, see `parents.py`).
  What changed: policy_version (the target's new policy version), harness_version
  (the target's harness version this event made active or proposed), knob,
  old_value, new_value (a move's setting, as text), code_diff, diagnosis
  (why the move was proposed), target (the failure label the move targets),
  intervention_id (the move's `interventions` row in the member's run.db, with
  its safety-gate backtest).
  Outcome at the next comparison (the member against its parent, paired):
  outcome ('won' | 'lost' | 'tied'), outcome_step, outcome_diff, outcome_low,
  outcome_high, outcome_n; skill_id (the skill card a won move became).
  stuck_json: a move a stuck population made without a copy (`coordinator`):
  the members' dead-group share that made it, with its groups and 95% Wilson
  interval (`Stuck`); NULL for a copy and for a move after a copy.
  error, created_at, updated_at.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from backend.store.base import StoreError, now

DB_NAME = "population.sqlite"
MIGRATIONS = Migrations("evotui-population")
EVENT_KINDS = ("copy", "move")
EVENT_STATUSES = ("planned", "applied", "pending", "approved", "vetoed", "failed")
OUTCOMES = ("won", "lost", "tied")


@MIGRATIONS(name="p001_initial")
def p001_initial(db: Database) -> None:
    db.table("populations").create({
        "id": int, "created_at": str, "updated_at": str, "status": str, "size": int, "every": int,
        "mode": str, "steps_total": int, "seed": int, "auto_promote": int, "step": int, "error": str,
        "config_json": str,
    }, pk="id")
    db.table("members").create({"idx": int, "name": str, "run_dir": str, "seed": int, "created_at": str}, pk="idx")
    db.table("scores").create({
        "id": int, "step": int, "member": int, "n": int, "correct": int, "acc": float, "best": int,
        "diff": float, "low": float, "high": float, "behind": int, "eval_id": int, "created_at": str,
    }, pk="id")
    db.table("scores").create_index(["step", "member"], unique=True)
    db.table("events").create({
        "id": int, "step": int, "kind": str, "member": int, "parent": int, "status": str,
        "diff": float, "low": float, "high": float, "n": int, "compared_json": str, "parent_score": float,
        "policy_version": int, "harness_version": int, "knob": str, "old_value": str, "new_value": str,
        "code_diff": str, "diagnosis": str, "outcome": str, "outcome_step": int, "outcome_diff": float,
        "outcome_low": float, "outcome_high": float, "outcome_n": int, "skill_id": int, "error": str,
        "created_at": str, "updated_at": str,
    }, pk="id")
    db.table("events").create_index(["step"])
    db.table("events").create_index(["member"])


@MIGRATIONS(name="p002_move_intervention")
def p002_move_intervention(db: Database) -> None:
    db.table("events").add_column("intervention_id", int)
    db.table("events").add_column("target", str)


@MIGRATIONS(name="p003_stuck_move")
def p003_stuck_move(db: Database) -> None:
    db.table("events").add_column("stuck_json", str)


@dataclass(frozen=True)
class Population:
    """The population's settings and where it stands."""

    size: int
    every: int
    mode: str
    steps_total: int
    seed: int
    auto_promote: bool
    step: int
    status: str
    config_json: str
    error: str | None = None
    created_at: str = ""

    def config(self) -> dict[str, Any]:
        """The members' base run config (a plain tree, as a run stores it)."""
        return dict(json.loads(self.config_json or "{}"))


@dataclass(frozen=True)
class Member:
    """One member: a normal run directory under POP."""

    idx: int
    name: str
    run_dir: str
    seed: int


@dataclass(frozen=True)
class Score:
    """A member's validation at one comparison, paired against the best member."""

    step: int
    member: int
    n: int
    correct: int
    acc: float
    best: bool
    diff: float
    low: float
    high: float
    behind: bool
    eval_id: int | None = None


@dataclass(frozen=True)
class Evidence:
    """The paired interval that decided an event: target minus the best member."""

    diff: float
    low: float
    high: float
    n: int
    compared: tuple[int, ...]


@dataclass(frozen=True)
class Stuck:
    """Why a stuck population moved: the members' dead groups over steps `first`..`last`."""

    dead: int
    groups: int
    share: float
    low: float
    high: float
    first: int
    last: int
    threshold: float


@dataclass(frozen=True)
class Event:
    """A copy or a move, its evidence, what it changed, and later its outcome."""

    id: int
    step: int
    kind: str
    member: int
    parent: int
    status: str
    evidence: Evidence
    parent_score: float | None = None
    policy_version: int | None = None
    harness_version: int | None = None
    knob: str | None = None
    old_value: str | None = None
    new_value: str | None = None
    code_diff: str | None = None
    diagnosis: str | None = None
    outcome: str | None = None
    outcome_step: int | None = None
    outcome_diff: float | None = None
    outcome_low: float | None = None
    outcome_high: float | None = None
    outcome_n: int | None = None
    skill_id: int | None = None
    error: str | None = None
    intervention_id: int | None = None
    target: str | None = None
    stuck: Stuck | None = None


@dataclass(frozen=True)
class Planned:
    """A copy or move decided at a comparison, before it is recorded."""

    step: int
    kind: str
    member: int
    parent: int
    evidence: Evidence
    parent_score: float | None = None
    stuck: Stuck | None = None
    """Set on a move a stuck population makes without a copy."""


@dataclass(frozen=True)
class Outcome:
    """A member against its parent at the comparison after an event."""

    result: str  # 'won' | 'lost' | 'tied'
    step: int
    diff: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class MoveChange:
    """What an explore move changes in a member's harness."""

    harness_version: int | None
    knob: str
    old_value: str
    new_value: str
    code_diff: str
    diagnosis: str
    target: str
    intervention_id: int


def _cols(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


class PopulationStore:
    """`POP/population.sqlite`. Use `PopulationStore.open(pop_dir)`; `create` only when starting one."""

    def __init__(self, db: Database, path: Path) -> None:
        self.db = db
        self.path = path

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, pop_dir: str | Path, create: bool = False, readonly: bool = False) -> "PopulationStore":
        """readonly: a reader (the TUI, `evotui report`) that never writes nor migrates."""
        path = Path(pop_dir) / DB_NAME
        if not path.exists() and (readonly or not create):
            raise StoreError(f"not an evotui population: {path} does not exist")
        try:
            target = f"file:{path}?mode=ro" if readonly else str(path)
            conn = sqlite3.connect(target, uri=readonly, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            db = Database(conn)
            if not readonly:
                db.enable_wal()
            applied = [m.name for m in MIGRATIONS.applied(db)] if "_sqlite_migrations" in db.table_names() else []
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {path}: {e}") from None
        known = [m.name for m in MIGRATIONS._migrations]
        if unknown := [m for m in applied if m not in known]:
            raise StoreError(f"{path} was written by a newer evotui (schema {unknown[-1]}); upgrade evotui")
        if not applied and db.table_names():
            raise StoreError(f"{path} is not an evotui population database")
        if not readonly:
            MIGRATIONS.apply(db)
        elif not applied:
            raise StoreError(f"{path} is not an evotui population database")
        return cls(db, path)

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction; BEGIN IMMEDIATE queues writers instead of failing."""
        self.db.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.conn.execute("ROLLBACK")
            raise
        self.db.conn.execute("COMMIT")

    def close(self) -> None:
        self.db.conn.close()

    @staticmethod
    def exists(pop_dir: str | Path) -> bool:
        return (Path(pop_dir) / DB_NAME).is_file()

    # ------------------------------------------------------------ population
    def create(self, pop: Population, members: Sequence[Member]) -> None:
        with self._tx():
            self.db.table("populations").insert({
                "id": 1, "created_at": now(), "updated_at": now(), "status": pop.status, "size": pop.size,
                "every": pop.every, "mode": pop.mode, "steps_total": pop.steps_total, "seed": pop.seed,
                "auto_promote": int(pop.auto_promote), "step": pop.step, "error": None,
                "config_json": pop.config_json})
            self.db.table("members").insert_all(
                [{"idx": m.idx, "name": m.name, "run_dir": m.run_dir, "seed": m.seed, "created_at": now()}
                 for m in members])

    def population(self) -> Population:
        rows = list(self.db.table("populations").rows_where("id = 1"))
        if not rows:
            raise StoreError(f"{self.path} holds no population")
        r = rows[0]
        return Population(**{k: r[k] for k in _cols(Population) if k != "auto_promote"},
                          auto_promote=bool(r["auto_promote"]))

    def set_population(self, *, status: str | None = None, step: int | None = None,
                       steps_total: int | None = None, error: str | None = None) -> None:
        vals: dict[str, Any] = {"updated_at": now()}
        for k, v in (("status", status), ("step", step), ("steps_total", steps_total), ("error", error)):
            if v is not None:
                vals[k] = v
        with self._tx():
            self.db.table("populations").update(1, vals)

    def members(self) -> list[Member]:
        return [Member(idx=r["idx"], name=r["name"], run_dir=r["run_dir"], seed=r["seed"])
                for r in self.db.table("members").rows_where(order_by="idx")]

    def member_dir(self, idx: int) -> Path:
        return self.path.parent / self.members()[idx].run_dir

    # ------------------------------------------------------------ scores
    def record_scores(self, scores: Sequence[Score]) -> None:
        """All members' scores of one comparison, at once (a resume that scores again replaces them)."""
        with self._tx():
            for s in scores:
                self.db.table("scores").upsert({
                    "step": s.step, "member": s.member, "n": s.n, "correct": s.correct, "acc": s.acc,
                    "best": int(s.best), "diff": s.diff, "low": s.low, "high": s.high, "behind": int(s.behind),
                    "eval_id": s.eval_id, "created_at": now()}, pk=("step", "member"))

    def scores(self, step: int | None = None) -> list[Score]:
        """Scores of one comparison (None: all), by step then member."""
        where, args = ("step = ?", [step]) if step is not None else (None, [])
        return [_score(r) for r in self.db.table("scores").rows_where(where, args, order_by="step, member")]

    def comparison_steps(self) -> list[int]:
        return sorted({s.step for s in self.scores()})

    # ------------------------------------------------------------ events
    def plan_events(self, planned: Sequence[Planned]) -> list[int]:
        """Record one comparison's copies and moves as 'planned', all in one transaction, before
        anything moves (a resume applies what is planned; it never decides twice); their ids."""
        ids = []
        with self._tx():
            for p in planned:
                if p.kind not in EVENT_KINDS:
                    raise ValueError(f"unknown event kind {p.kind!r}")
                ev = p.evidence
                ids.append(int(self.db.table("events").insert({  # type: ignore[arg-type]  # rowid table
                    "step": p.step, "kind": p.kind, "member": p.member, "parent": p.parent, "status": "planned",
                    "diff": ev.diff, "low": ev.low, "high": ev.high, "n": ev.n,
                    "compared_json": json.dumps(list(ev.compared)), "parent_score": p.parent_score,
                    "stuck_json": json.dumps(asdict(p.stuck)) if p.stuck else None,
                    "created_at": now(), "updated_at": now()}).last_pk))
        return ids

    def set_event(self, event_id: int, status: str, *, policy_version: int | None = None,
                  harness_version: int | None = None, error: str | None = None) -> None:
        if status not in EVENT_STATUSES:
            raise ValueError(f"unknown event status {status!r}")
        vals: dict[str, Any] = {"status": status, "updated_at": now()}
        for k, v in (("policy_version", policy_version), ("harness_version", harness_version), ("error", error)):
            if v is not None:
                vals[k] = v
        with self._tx():
            self.db.table("events").update(event_id, vals)

    def set_move(self, event_id: int, change: MoveChange) -> None:
        """What a move changes (its knob, old -> new, diff, diagnosis and proposed harness version)."""
        with self._tx():
            self.db.table("events").update(event_id, {
                "harness_version": change.harness_version, "knob": change.knob, "old_value": change.old_value,
                "new_value": change.new_value, "code_diff": change.code_diff, "diagnosis": change.diagnosis,
                "target": change.target, "intervention_id": change.intervention_id, "updated_at": now()})

    def set_outcome(self, event_id: int, outcome: Outcome) -> None:
        if outcome.result not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome.result!r}")
        with self._tx():
            self.db.table("events").update(event_id, {
                "outcome": outcome.result, "outcome_step": outcome.step, "outcome_diff": outcome.diff,
                "outcome_low": outcome.low, "outcome_high": outcome.high, "outcome_n": outcome.n,
                "updated_at": now()})

    def set_skill(self, event_id: int, skill_id: int) -> None:
        with self._tx():
            self.db.table("events").update(event_id, {"skill_id": skill_id, "updated_at": now()})

    def event(self, event_id: int) -> Event | None:
        rows = list(self.db.table("events").rows_where("id = ?", [event_id]))
        return _event(rows[0]) if rows else None

    def events(self, *, step: int | None = None, member: int | None = None,
               statuses: Sequence[str] = ()) -> list[Event]:
        """Events in id order, filtered by step, target member and status."""
        where: list[str] = []
        args: list[int | str] = []
        for clause, value in (("step = ?", step), ("member = ?", member)):
            if value is not None:
                where.append(clause)
                args.append(value)
        if statuses:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            args.extend(statuses)
        return [_event(r) for r in self.db.table("events").rows_where(" AND ".join(where) or None, args,
                                                                       order_by="id")]


def _score(r: dict[str, Any]) -> Score:
    return Score(step=r["step"], member=r["member"], n=r["n"], correct=r["correct"], acc=r["acc"],
                 best=bool(r["best"]), diff=r["diff"], low=r["low"], high=r["high"], behind=bool(r["behind"]),
                 eval_id=r["eval_id"])


def _event(r: dict[str, Any]) -> Event:
    ev = Evidence(diff=r["diff"], low=r["low"], high=r["high"], n=r["n"],
                  compared=tuple(json.loads(r["compared_json"] or "[]")))
    stuck = Stuck(**json.loads(r["stuck_json"])) if r.get("stuck_json") else None
    keep = _cols(Event) - {"evidence", "stuck"}
    return Event(evidence=ev, stuck=stuck, **{k: r[k] for k in keep})
