"""Waiting on an engine process by what it has done, never by how long it took.

The one rule for every wait in the tests (`Watch`): a wait fails when nothing has progressed
for a stall window -- the engine's CPU time (its children's included), its run database and
WAL file unchanged -- never because a fixed total time passed. A loaded CI box (a load average
of 10 on 2 cores) gives a slow test, not a failed one. One very large ceiling stays, only for an
engine that keeps busy without ever getting there (a spinning loop); both failures say what was
waited for and what was last seen.

- `wait_for(what, condition, proc)`: poll a condition (a committed step, a recorded phase)
  while the engine is alive and progressing.
- `communicate(proc, what)`: `proc.communicate()` while the process progresses.
- `run_process(cmd)`: `subprocess.run(cmd, capture_output=True, text=True)` the same way.

Progress sources are small functions that return a description of the state (a string); a
change of the description is progress: `cpu(proc)`, `in_process()`, `files(...)`,
`run_files(run)`, and `either(...)` to join them.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import psutil

T = TypeVar("T")
Progress = Callable[[], str]

STALL_S = 600.0
"""How long nothing may change before a wait fails: a process that runs, however slowly, uses
CPU every second (a share of a core under any load); only a deadlock or a lost process sits
this long with no CPU and no write."""

CEILING_S = 3600.0
"""Longest wait for one condition however busy the process is: a safety net for an engine that
spins without getting anywhere (a step of these sizes takes seconds; under load, minutes)."""


class Stalled(AssertionError):
    """A wait gave up: nothing progressed for the stall window, or the ceiling passed."""


class EngineGone(AssertionError):
    """The engine exited before the condition held."""


@dataclass
class Watch:
    """The stall rule for one wait: call `check()` between polls; it raises `Stalled` once
    `progress` has returned the same description for more than `stall_s`, or `ceiling_s` after
    the start. Without a progress source only the ceiling applies. `clock` is injectable."""

    what: str
    progress: Progress | None = None
    stall_s: float = STALL_S
    ceiling_s: float = CEILING_S
    clock: Callable[[], float] = time.monotonic
    sample_s: float = 1.0
    """How often the source is asked (a process tree's CPU time walks /proc): between samples a
    check only compares clocks."""
    seen: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.started = self.moved = self.sampled = self.clock()
        if self.progress is not None:
            self.seen = self.progress()

    def check(self) -> None:
        now = self.clock()
        if self.progress is not None and now - self.sampled >= self.sample_s:
            self.sampled, seen = now, self.progress()
            if seen != self.seen:
                self.seen, self.moved = seen, now
            elif now - self.moved > self.stall_s:
                raise Stalled(f"waited for {self.what}: nothing progressed for {now - self.moved:.0f} s "
                              f"(stall window {self.stall_s:.0f} s, {now - self.started:.0f} s in all); "
                              f"last seen: {self.seen}")
        if now - self.started > self.ceiling_s:
            raise Stalled(f"waited for {self.what}: still not there after the {self.ceiling_s:.0f} s ceiling, "
                          f"though it kept progressing (a spinning engine?); last seen: {self.seen}")


# ---------------------------------------------------------------- progress sources

def _tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of process `pid`, its living descendants and its reaped children; None once gone."""
    try:
        root = psutil.Process(pid)
        t = root.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        kids = root.children(recursive=True)
    except psutil.Error:
        return None
    for kid in kids:
        try:
            k = kid.cpu_times()
            total += k.user + k.system
        except psutil.Error:  # it exited meanwhile: its parent's children_* take it over
            pass
    return total


def cpu(proc: subprocess.Popen | int) -> Progress:
    """The CPU time of a process and its children (an engine, a compare and its arms)."""
    pid = proc if isinstance(proc, int) else proc.pid

    def seen() -> str:
        s = _tree_cpu_s(pid)
        return f"pid {pid} gone" if s is None else f"pid {pid} and children at {s:.2f} CPU s"
    return seen


def in_process() -> Progress:
    """The CPU time of this process's other threads and of its children: an engine run in-process
    while the calling thread waits on it (the waiter's own polling does not count)."""
    me = psutil.Process()

    def seen() -> str:
        kids = sum(_tree_cpu_s(k.pid) or 0.0 for k in me.children())
        return f"other threads at {time.process_time() - time.thread_time():.2f} CPU s, children at {kids:.2f}"
    return seen


def files(*paths: Path) -> Progress:
    """The size and modification time of each file (missing ones too: their creation is progress)."""
    def seen() -> str:
        parts = []
        for p in map(Path, paths):
            try:
                st = p.stat()
                parts.append(f"{p.name} {st.st_size} B @ {st.st_mtime_ns}")
            except OSError:
                parts.append(f"no {p.name}")
        return ", ".join(parts)
    return seen


def run_files(run: Path) -> Progress:
    """A run's database and its WAL file: every write the engine commits changes one of them."""
    return files(Path(run) / "run.db", Path(run) / "run.db-wal")


def either(*sources: Progress) -> Progress:
    """Progress when any of `sources` progresses."""
    return lambda: "; ".join(s() for s in sources)


# ---------------------------------------------------------------- waits

def _stderr_tail(proc: subprocess.Popen, chars: int = 3000) -> str:
    """What an exited process left on its stderr pipe, if it has one."""
    if proc.stderr is None or proc.stderr.closed:
        return ""
    err = proc.stderr.read() or ""
    return (err.decode(errors="replace") if isinstance(err, bytes) else err)[-chars:]


def _with_cpu(proc: subprocess.Popen | None, progress: Progress | None) -> Progress | None:
    """The process's CPU time joined with `progress` (either may be missing)."""
    sources = [s for s in (cpu(proc) if proc is not None else None, progress) if s is not None]
    return either(*sources) if sources else None


def wait_for(what: str, condition: Callable[[], T], proc: subprocess.Popen | None = None,
             poll_s: float = 0.05, progress: Progress | None = None, stall_s: float = STALL_S,
             ceiling_s: float = CEILING_S, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """Poll `condition` until it returns something truthy, and return that. Raises `EngineGone`
    (naming `what`, the engine's exit status and its stderr) when `proc` exits first, and
    `Stalled` by the `Watch` rule over the CPU time of `proc` and any other `progress`."""
    progress = _with_cpu(proc, progress)
    watch = Watch(what, progress, stall_s, ceiling_s, clock)
    while True:
        got = condition()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            got = condition()  # it may have got there just before it exited
            if got:
                return got
            raise EngineGone(f"waited for {what}, but the engine exited with status {proc.returncode} first"
                             f"\n{_stderr_tail(proc)}".rstrip())
        watch.check()
        sleep(poll_s)


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    for p in kids:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.kill()


def communicate(proc: subprocess.Popen, what: str | None = None, progress: Progress | None = None,
                poll_s: float = 0.5, stall_s: float = STALL_S, ceiling_s: float = CEILING_S) -> tuple:
    """`proc.communicate()` for as long as the process progresses (its CPU time, or any other
    `progress`); returns (stdout, stderr). On a stall it kills the process and its children and
    raises `Stalled` with the end of their stderr."""
    watch = Watch(what or f"{' '.join(map(str, proc.args))[:200]} to exit", _with_cpu(proc, progress), stall_s,
                  ceiling_s)
    while True:
        try:
            return proc.communicate(timeout=poll_s)  # a retry after TimeoutExpired loses no output
        except subprocess.TimeoutExpired:
            pass
        try:
            watch.check()
        except Stalled as e:
            _kill_tree(proc)
            _, err = proc.communicate()
            raise Stalled(f"{e}\nstderr: {(err or '')[-3000:]}") from None


def run_process(cmd: list, what: str | None = None, progress: Progress | None = None,
                **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` under the stall rule of `communicate`
    (the process's CPU time, and `progress` if given: the run it writes)."""
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    out, err = communicate(proc, what, progress)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# ---------------------------------------------------------------- reading the run

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
