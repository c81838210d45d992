"""The run store: one SQLite file per run (WAL). The only package with SQL.

Other modules ask the store by name (`store.unjudged_promotions(step)`) and
get typed records or plain rows back. `Store` composes the repository methods
by concern: `records` (interventions, backtests, rounds, harness versions,
skills), `rollouts` (what evolution reads about training), `reports` (the
tools' reads); the run, its steps, evaluations and commands are here; the
TUI's read-only queries are `reader`; the connection and transactions `base`.
tests/test_store_owns_sql.py checks that no module outside this package holds SQL.

    >>> s = Store.open("/tmp/x/run.db")      # migrations applied on open
    >>> s.log("info", "hello")

Writers (the engine) and readers (the TUI, the CLI) open the same file; the
TUI writes only `commands`. Each training step is committed in one
transaction (`Store.commit_step`), so a kill at any point leaves either the
whole step or none of it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .base import BUSY_S, Queries, Row, StoreError, db_problem, dumps, loads, now
from .records import EvolutionRecords
from .reports import ReportReads
from .rollouts import RolloutReads
from .search import SearchReads


__all__ = ["BUSY_S", "Row", "StepCommit", "Store", "StoreError", "dumps", "integrity_ok", "loads", "now"]


def _connect(path: Path, readonly: bool, busy_s: float, immutable: bool = False) -> sqlite3.Connection:
    if readonly:
        uri = f"file:{path}?mode=ro" + ("&immutable=1" if immutable else "")
        conn = sqlite3.connect(uri, uri=True, timeout=busy_s, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=busy_s, check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


ROUND_INTERRUPTED = "interrupted: the engine stopped during this round"
"""The summary of a round its engine never finished (`Store.fail_interrupted`)."""


def checkpoint_in_run(run_dir: Path, stored: str) -> Path:
    """Where a checkpoint the store names lies in `run_dir`. A version's row keeps the path its
    folder was written at; a run directory moved or copied since (another disk, another host)
    holds the folder at the same place under its own `checkpoints/`, and a copy must not read
    the original's, which its own run may prune.

    >>> str(checkpoint_in_run(Path("/new/run"), "/old/run/checkpoints/step_000003"))
    '/new/run/checkpoints/step_000003'
    """
    parts = Path(stored).parts
    if "checkpoints" not in parts:
        return Path(run_dir, stored)  # relative, or a folder of another layout: as written
    last = len(parts) - 1 - parts[::-1].index("checkpoints")
    return Path(run_dir, *parts[last:])


class Store(EvolutionRecords, RolloutReads, ReportReads, SearchReads, Queries):
    """A run database. Use `Store.open(path)`; `readonly=True` never writes.

    The repository methods come by concern: `records.EvolutionRecords` (interventions,
    backtests, rounds, harness versions, skills), `rollouts.RolloutReads` (what evolution
    reads about training), `reports.ReportReads` (the tools' reads); the run, its steps,
    evaluations and commands are here."""

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, readonly: bool = False, create: bool = True, busy_s: float = BUSY_S) -> "Store":
        """busy_s: how long to wait for a lock another process holds (the shell waits less than the engine)."""
        path = Path(path)
        if path.is_dir():
            path = path / "run.db"
        if not path.exists() and (readonly or not create):
            raise StoreError(f"not an evotui run: {path} does not exist")
        if not create and path.is_file() and path.stat().st_size == 0:  # do not turn it into one
            raise StoreError(f"{path} is not an evotui run database")
        try:
            return cls._open(path, readonly, busy_s, create)
        except sqlite3.DatabaseError as e:
            if not (readonly and "unable to open" in str(e) and not Path(f"{path}-shm").exists()):
                raise StoreError(db_problem(path, e)) from None
        # On read-only media a reader cannot create the WAL index (-shm), and no writer can be there
        try:
            return cls._open(path, readonly, busy_s, create, immutable=True)
        except sqlite3.DatabaseError as e:
            raise StoreError(db_problem(path, e)) from None

    @classmethod
    def _open(cls, path: Path, readonly: bool, busy_s: float, create: bool, immutable: bool = False) -> "Store":
        store = cls(_connect(path, readonly, busy_s, immutable), path, busy_s)
        try:
            store._check_schema(readonly, create)
        except BaseException:
            store.close()
            raise
        return store

    def _check_schema(self, readonly: bool, create: bool) -> None:
        from .schema import MIGRATIONS, TABLES, known_migrations

        applied = [m.name for m in MIGRATIONS.applied(self.db)] if "_sqlite_migrations" in self.db.table_names() else []
        unknown = [m for m in applied if m not in known_migrations()]
        if unknown:
            raise StoreError(
                f"{self.path} was written by a newer evotui (schema {unknown[-1]}); upgrade evotui to open it"
            )
        if not applied and (readonly or not create or [t for t in self.db.table_names() if t not in TABLES]):
            raise StoreError(f"{self.path} is not an evotui run database")  # empty, or someone else's
        if not readonly:
            MIGRATIONS.apply(self.db)

    # ------------------------------------------------------------ run
    def create_run(self, name: str, config: dict[str, Any], seed: int, steps: int) -> None:
        with self.tx():
            self.insert("runs", {
                "id": 1, "name": name, "created_at": now(), "updated_at": now(), "status": "created",
                "domain": config.get("domain"), "seed": seed, "step": 0, "steps_total": steps,
                "heldout_acc": None, "harness_version": None, "policy_version": None,
                "auto_promote": int(bool(config.get("evolve", {}).get("auto_promote"))), "paused": 0,
                "pid": None, "error": None, "config_json": dumps(config),
            })

    def run(self) -> dict[str, Any]:
        row = self.get("runs", 1)
        if row is None:
            raise StoreError(f"{self.path} holds no run")
        return row

    def set_run(self, **values: Any) -> None:
        values["updated_at"] = now()
        with self.tx():
            self.update("runs", 1, values)

    def log(self, level: str, message: str, kind: str = "log", step: int | None = None, data: Any = None) -> None:
        with self.tx():
            self.insert("events", {"ts": now(), "step": step, "level": level, "kind": kind,
                                   "message": message, "data_json": dumps(data)})

    # ------------------------------------------------------------ steps
    def last_step(self) -> int:
        return self.scalar("SELECT coalesce(max(step), 0) FROM steps") or 0

    def commit_step(self, step: Row, rollouts: list[Row], diagnoses_by_rollout: list[list[Row]],
                    turns_by_rollout: list[list[Row]] | None = None, policy_version: Row | None = None,
                    run_values: Row | None = None, ready: Callable[[], object] | None = None) -> StepCommit:
        """Write one whole step atomically.

        `ready`: called after the rows are written and before the transaction commits (the
        checkpoint's files being written beside it, `checkpoint.begin_save`); if it raises,
        nothing of the step is stored.

        `policy_version`: the version this step saved (parent, checkpoint, ...), without an id:
        the store numbers policy versions, here and nowhere else, as the next id the table has
        not used. The run's current policy can be older than the newest version (after a
        rollback), so an id counted on from it would repeat one already stored. The step row
        and the run point at the new version."""
        with self.tx():
            # The ids are the ones SQLite would give one by one (max + 1 on): the transaction
            # holds the write lock.
            first = int(self.scalar("SELECT coalesce(max(id), 0) + 1 FROM rollouts"))
            ids = list(range(first, first + len(rollouts)))
            diags, turns = [], []
            for i, rid in enumerate(ids):
                diags += [dict(d, rollout_id=rid) for d in diagnoses_by_rollout[i]]
                if turns_by_rollout and turns_by_rollout[i]:
                    turns += [dict(t, rollout_id=rid) for t in turns_by_rollout[i]]
            self._insert_rows("rollouts", [dict(r, id=rid) for r, rid in zip(rollouts, ids)])
            self._insert_rows("diagnoses", diags)
            self._insert_rows("turns", turns)
            vals = dict(run_values or {}, step=step["step"], updated_at=now())
            pv = None
            if policy_version:
                pv = self._insert_policy_version(policy_version)
                step, vals["policy_version"] = dict(step, policy_version=pv), pv
            self.insert("steps", step)
            self.update("runs", 1, vals)
            if ready is not None:
                ready()
        return StepCommit(ids, pv)

    def _insert_rows(self, table: str, rows: list[Row]) -> None:
        """Insert many rows in as few statements as SQLite's parameter limit allows.

        Not a statement a row: sqlite-utils' per-row insert inspects the table every time (~70 ms
        for a 512-rollout step); every statement on `rollouts` ends by flushing the full-text
        index its trigger fills, so 512 one-row statements cost about twice one 512-row statement
        (`benchmarks/step_commit.py`); and each statement takes the interpreter's lock back from
        the checkpoint's writing thread."""
        if not rows:
            return
        keys = sorted({k for r in rows for k in r})
        cols = ", ".join(f'"{k}"' for k in keys)
        one = "(" + ", ".join("?" * len(keys)) + ")"
        per = max(1, self.conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(keys))
        for i in range(0, len(rows), per):
            chunk = rows[i:i + per]
            self.conn.execute(f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([one] * len(chunk)),
                              [v for r in chunk for v in _values(r, keys)])

    def _insert_policy_version(self, version: Row) -> int:
        if "id" in version:
            raise ValueError("a new policy version gets its id from the store")
        pv = int(self.scalar("SELECT coalesce(max(id), 0) + 1 FROM policy_versions"))
        self.insert("policy_versions", dict(version, id=pv))
        return pv

    def add_policy_version(self, step: int, version: Row) -> int:
        """Store the policy version that committed `step` saved, once its files are in place
        (`train.checkpoint_overlap`, backend/checkpoint_overlap.py); numbered as `commit_step`
        numbers one, and the step row and the run point at it."""
        with self.tx():
            pv = self._insert_policy_version(version)
            self.update("steps", step, {"policy_version": pv})
            self.update("runs", 1, {"policy_version": pv, "updated_at": now()})
        return pv

    def drop_step(self, step: int) -> None:
        """Remove every row of `step` (its rollouts, their turns and diagnoses, the step row): a
        step whose checkpoint never reached the disk, which the run then trains again."""
        rollouts = "SELECT id FROM rollouts WHERE step = ?"
        with self.tx():
            self.conn.execute(f"DELETE FROM diagnoses WHERE rollout_id IN ({rollouts})", (step,))
            self.conn.execute(f"DELETE FROM turns WHERE rollout_id IN ({rollouts})", (step,))
            self.conn.execute("DELETE FROM rollouts WHERE step = ?", (step,))
            self.conn.execute("DELETE FROM steps WHERE step = ?", (step,))
            self.update("runs", 1, {"step": self.last_step(), "updated_at": now()})

    def pending_version(self) -> tuple[int, Row] | None:
        """(step, version) when the last step's policy version still waits for its checkpoint's
        files (`train.checkpoint_overlap`: the run stopped or died before `add_policy_version`);
        else None."""
        row = self.conn.execute("SELECT step, json_extract(metrics_json, '$.version_pending') AS version "
                                "FROM steps ORDER BY step DESC LIMIT 1").fetchone()
        if row is None or row["version"] is None:
            return None
        if self.scalar("SELECT count(*) FROM policy_versions WHERE step = ?", (row["step"],)):
            return None
        return int(row["step"]), loads(row["version"], {})

    def current_policy_version(self) -> Row | None:
        """The policy the run trains now, which a resume loads: the version its last checkpointed
        step saved or, after a rollback, the one restored (None: the base model, no adapter)."""
        pv = self.run().get("policy_version")
        return self.get("policy_versions", pv) if pv else None

    def checkpoint_of(self, version: Row | None) -> Path | None:
        """The folder of a policy version's checkpoint in this run (None: no version, or none
        saved), by `checkpoint_in_run`."""
        if not version or not version.get("checkpoint"):
            return None
        return checkpoint_in_run(self.path.parent, version["checkpoint"])

    # ------------------------------------------------------------ recovery
    def fail_interrupted(self) -> int:
        """On restart, what a stopped or killed engine left mid-flight says so: its interventions are
        marked failed, and a round it never finished says it was interrupted (a resume goes on
        after the last committed step; it does not run that round again). A pause, resume or stop
        no engine took is expired: the resume that starts the run again is the operator's newer word
        (a stop sent to an engine that had died would otherwise end the resumed run at once);
        approvals and vetoes wait for the step as before. Returns the interventions."""
        with self.tx():
            cur = self.conn.execute(
                "UPDATE interventions SET status = 'failed', reason = 'interrupted: the engine stopped during its "
                "backtest', updated_at = ? WHERE status IN ('proposed', 'backtesting')", (now(),))
            self.conn.execute(f"UPDATE rounds SET summary = '{ROUND_INTERRUPTED}' WHERE summary = 'running'")
            self.conn.execute(
                "UPDATE commands SET status = 'expired', result = 'no engine took it: the run was started again "
                "since', acked_at = ? WHERE status = 'pending' AND verb IN ('pause', 'resume', 'stop')", (now(),))
            return cur.rowcount

    # ------------------------------------------------------------ held-out evaluations
    def record_evals(self, step: int, results: dict[str, list[dict[str, Any]]], agreement: dict[str, float],
                     policy_version: int | None, harness_version: int | None, ms: float = 0.0) -> dict[str, float]:
        """One `evals` row per split ("validation", "test") in one transaction; returns {split: accuracy}.
        `results`: per split, one {"task_id", "correct", "status", "reward"} per problem."""
        acc = {k: sum(bool(r["correct"]) for r in v) / max(len(v), 1) for k, v in results.items()}
        with self.tx():
            for split, rows in results.items():
                self.insert("evals", {
                    "step": step, "created_at": now(), "policy_version": policy_version,
                    "harness_version": harness_version, "split": split, "n": len(rows), "accuracy": acc[split],
                    "agreement": agreement.get(split), "results_json": dumps(rows), "ms": ms})
            run = {"val_acc": acc.get("validation"), "test_acc": acc.get("test"), "updated_at": now()}
            run["heldout_acc"] = run["test_acc"]  # older readers show the reported number
            self.update("runs", 1, {k: v for k, v in run.items() if v is not None})
            if policy_version and "validation" in acc:
                self.update("policy_versions", policy_version, {"heldout_acc": acc["validation"]})
        return acc

    def latest_eval(self, split: str = "validation") -> dict[str, Any] | None:
        """The newest evaluation of one split (the gate asks only for "validation")."""
        rows = self.rows("SELECT * FROM evals WHERE split = ? ORDER BY step DESC, id DESC LIMIT 1", (split,))
        return rows[0] if rows else None

    def eval_at(self, step: int, split: str = "validation", before: bool = False) -> dict[str, Any] | None:
        """The evaluation of one split at `step` (the newest there), or with `before` the newest
        one before `step`; None when there is none."""
        op = "<" if before else "="
        rows = self.rows(f"SELECT * FROM evals WHERE split = ? AND step {op} ? ORDER BY step DESC, id DESC LIMIT 1",
                         (split, step))
        return rows[0] if rows else None

    def eval_outcomes(self, eval_id: int | None) -> dict[str, bool]:
        """{task_id: correct} of one evaluation row ({} when it kept no per-problem results)."""
        row = self.get("evals", eval_id) if eval_id else None
        return {str(r["task_id"]): bool(r["correct"]) for r in loads(row.get("results_json") if row else None, []) or []
                if isinstance(r, dict) and "task_id" in r}

    # ------------------------------------------------------------ commands
    def send_command(self, verb: str, arg: dict[str, Any] | None = None, source: str = "cli") -> int:
        with self.tx():
            return self.insert("commands", {"created_at": now(), "verb": verb, "arg_json": dumps(arg or {}),
                                            "source": source, "status": "pending", "result": None,
                                            "acked_at": None})

    def pending_commands(self) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM commands WHERE status = 'pending' ORDER BY id")

    def ack_command(self, cid: int, status: str, result: str) -> None:
        with self.tx():
            self.update("commands", cid, {"status": status, "result": result, "acked_at": now()})


@dataclass(frozen=True)
class StepCommit:
    """What `Store.commit_step` wrote: the rollout ids, and the policy version's id (None: none)."""

    rollout_ids: list[int]
    policy_version: int | None


def _values(row: dict[str, Any], keys: list[str]) -> list[Any]:
    """The row in column order, as sqlite-utils would store it: dicts and lists as JSON text."""
    return [json.dumps(v, default=str) if isinstance(v := row.get(k), (dict, list, tuple)) else v for k in keys]


def integrity_ok(path: str | Path) -> bool:
    conn = sqlite3.connect(str(path))
    try:
        return bool(conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    finally:
        conn.close()
