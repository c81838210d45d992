"""Waiting on an engine process by what it has done, never by how long it took.

A test that starts `evotui run` waits for a condition on the run's database (a committed
step, a phase the engine recorded), for as long as the engine is alive and making the
condition possible. The ceiling is for a hung engine only: far above any run of these sizes on
a loaded machine, and the failure says what was waited for, so a slow CI box gives a slow test,
not a failed one.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

CEILING_S = 1800.0
"""Longest wait for one condition: only a hung engine reaches it (a step of these sizes takes
seconds; under a load average of 10 on 2 cores, a minute)."""


class EngineGone(AssertionError):
    """The engine exited before the condition held."""


def read(run: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of `sql` on the run's database, read-only; [] while it does not exist yet or is being
    created (a reader never waits on the engine's write lock: WAL)."""
    db = Path(run) / "run.db"
    if not db.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:  # no tables yet: the engine is applying the migrations
        return []


def scalar(run: Path, sql: str, params: tuple = (), default=None):
    rows = read(run, sql, params)
    return rows[0][0] if rows and rows[0][0] is not None else default


def last_step(run: Path) -> int:
    return int(scalar(run, "SELECT max(step) FROM steps", default=0))


def wait_for(what: str, condition: Callable[[], T], proc: subprocess.Popen | None = None,
             poll_s: float = 0.05, ceiling_s: float = CEILING_S) -> T:
    """Poll `condition` until it returns something truthy, and return that. Raises `EngineGone`
    (naming `what` and the engine's exit status) when `proc` exits first, AssertionError after
    `ceiling_s` of an engine that neither got there nor exited."""
    start = time.monotonic()
    while True:
        got = condition()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            got = condition()  # it may have got there just before it exited
            if got:
                return got
            raise EngineGone(f"waited for {what}, but the engine exited with status {proc.returncode} first")
        if time.monotonic() - start > ceiling_s:
            raise AssertionError(f"waited {ceiling_s:.0f} s for {what}: the engine is alive but hung")
        time.sleep(poll_s)
