"""The connection under every store: one write transaction at a time, generic row access.

`Queries` is what the repository mixins (`records.py`, `rollouts.py`,
`reports.py`) build on and what `Store` composes; it holds no knowledge of
any table. JSON columns go through `dumps`/`loads`, timestamps through `now`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from backend.errors import EvoError

Row = dict[str, Any]
"""One table row as a dict (column -> value)."""


class StoreError(EvoError, RuntimeError):
    """A user-facing store problem (not a run, newer schema, locked, ...)."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def dumps(obj: Any) -> str | None:
    return json.dumps(obj, default=str, allow_nan=False, separators=(",", ":")) if obj is not None else None


def loads(text: str | None, default: Any = None) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


BUSY_S = 30.0
"""How long a writer waits for another process's write lock before giving up."""


class Queries:
    """A run database connection: transactions and table-agnostic row access."""

    def __init__(self, conn: sqlite3.Connection, path: Path, busy_s: float = BUSY_S) -> None:
        from sqlite_utils import Database  # imports pandas: only when a Store is opened

        self.conn = conn
        self.path = path
        self.busy_s = busy_s
        self.db = Database(conn)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def tx(self) -> Iterator[Queries]:
        """One write transaction (BEGIN IMMEDIATE: writers queue instead of failing), waiting
        at most `busy_s` in all for the write lock."""
        deadline = time.monotonic() + self.busy_s
        attempt = 0
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreError(db_problem(self.path, e)) from None
                attempt += 1
                time.sleep(min(0.05 * attempt, 0.5))
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def insert(self, table: str, row: Row) -> int:
        return int(self.db.table(table).insert(row).last_pk)  # type: ignore[arg-type]  # a rowid table

    def insert_many(self, table: str, rows: Iterable[Row]) -> None:
        self.db.table(table).insert_all(rows, batch_size=500)

    def update(self, table: str, pk: Any, values: Row) -> None:
        self.db.table(table).update(pk, values)

    def get(self, table: str, pk: Any) -> Row | None:
        row = self.conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (pk,)).fetchone()
        return dict(row) if row else None

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        return [dict(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def rows_in(self, sql: str, ids: Sequence[Any]) -> list[Row]:
        """`rows` of `sql` whose `{ids}` stands for a parameter list of `ids`, e.g.
        "SELECT * FROM diagnoses WHERE rollout_id IN ({ids})"; no ids: no rows."""
        if not ids:
            return []
        return self.rows(sql.replace("{ids}", ", ".join("?" * len(ids))), ids)

    def scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        row = self.conn.execute(sql, tuple(params)).fetchone()
        return row[0] if row else None

    def count(self, table: str) -> int:
        return int(self.scalar(f"SELECT count(*) FROM {table}") or 0)


def db_problem(path: Path, e: sqlite3.Error) -> str:
    """One line for the user about a database that cannot be used right now."""
    text = str(e)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process; try again when it is free"
    if "readonly" in text or (path.exists() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))):
        return f"{path} is read-only here (a read-only disk or folder), so nothing can be changed: {text}"
    return f"cannot open {path}: {text}"
