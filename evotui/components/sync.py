"""Data in and commands out: the app's I/O, all in named workers that post messages.

In: watchfiles on the run directory (an async worker) and a slow tick post
`DataChanged`; at most one poll runs at a time, and changes that arrive while
it runs coalesce into one more poll after a short throttle. A poll checks
`PRAGMA data_version` first and reads only rows newer than its cursor.

Out: operator commands are rows in `commands`, written from a worker through
the run's own store (the only writes the TUI makes).
"""

from __future__ import annotations

import ast
import sqlite3
import threading
from pathlib import Path

from textual import work
from textual.worker import Worker, WorkerState, get_current_worker

from backend.harness import run_file
from backend.store.reader import PollCursor, RunReader, code_proposed, harness_code_known, read_delta, tail_file
from evotui.engine_process import EngineHealth, engine_health
from evotui.messages import CommandSent, DataChanged, HarnessFileChanged, RunUpdated

TICK_S = 1.0  # data_version check and liveness probe when watchfiles is quiet
THROTTLE_S = 0.25  # least time between two polls under a flood of writes
WATCHED = {"run.db", "run.db-wal", "engine.log"}
LOG_LINES = 200


class SyncMixin:
    """Mixed into `EvoApp`: readers, polling, watching, command writing."""

    run_dir: Path
    engine_procs: list

    def _init_sync(self) -> None:
        self._readers: dict[str, RunReader] = {}
        self._writer = None  # a writable Store, opened on the first command
        self._write_lock = threading.Lock()  # one connection, written from worker threads
        self._readers_lock = threading.Lock()
        self._cursor = PollCursor()
        self._log_size = -1
        self._dirty = False
        self._proposed_code: str | None = None

    def reader(self, name: str = "poll") -> RunReader:
        """A read-only connection per purpose, so a slow search never delays a poll."""
        with self._readers_lock:  # two workers asking for a new name at once get one connection
            if name not in self._readers:
                self._readers[name] = RunReader.open(self.run_dir)
            return self._readers[name]

    def start_sync(self, watch: bool) -> None:
        self.reader("poll")  # fail early, in the UI thread, if the run cannot be opened
        if watch:
            self.watch_run_dir()
            self.set_interval(TICK_S, self.request_poll)
        self.request_poll(force=True)

    # ------------------------------------------------------------ polling
    def request_poll(self, force: bool = False) -> None:
        if any(w.group == "poll" and w.is_running for w in self.workers):
            self._dirty = True
            return
        self._poll(self._cursor, self.state.run, self.health, self._log_size, force)

    @work(thread=True, group="poll", exit_on_error=False)
    def _poll(self, cursor: PollCursor, run: dict, health: EngineHealth, log_size: int, force: bool) -> None:
        self.reap_engines()  # before the liveness probe: a zombie's pid still answers
        delta = self.reader("poll").call(read_delta, cursor, force=force)
        new_health = engine_health(delta.run if delta else run, self.run_dir, self.probe)
        log = self.run_dir / "engine.log"
        size = log.stat().st_size if log.exists() else 0
        lines = tail_file(log, LOG_LINES) if size != log_size else None
        if delta is not None or new_health != health or lines is not None:
            self.post_message(RunUpdated(delta, new_health, None if lines is None else (size, lines)))

    def reap_engines(self) -> None:
        """Collect the exit status of engine processes this app started, so none lingers as a
        zombie (and its pid stops answering the liveness probe)."""
        for proc in list(self.engine_procs):
            if getattr(proc, "poll", lambda: 0)() is not None:
                self.engine_procs.remove(proc)

    def on_data_changed(self, _: DataChanged) -> None:
        self.request_poll()

    def _after_poll(self) -> None:
        if self._dirty:
            self._dirty = False
            self.set_timer(THROTTLE_S, self.request_poll)

    # ------------------------------------------------------------ watching
    @work(group="watch", exit_on_error=False)
    async def watch_run_dir(self) -> None:
        from watchfiles import awatch  # imported here: not needed to draw the first frame

        async for changes in awatch(self.run_dir, recursive=False, debounce=300, step=30):
            names = {Path(path).name for _, path in changes}
            if names & {run_file.ACTIVE, run_file.DRAFT}:
                self.post_message(HarnessFileChanged())
            if names & WATCHED:
                self.post_message(DataChanged())

    def on_harness_file_changed(self, _: HarnessFileChanged) -> None:
        self.check_harness_edit()

    @work(thread=True, group="harness-edit", exclusive=True, exit_on_error=False)
    def check_harness_edit(self) -> None:
        """A hand edit of harness.py or harness.draft.py becomes a `propose_edit` command (the
        engine backtests it, and moves an edit of harness.py to the draft)."""
        for name in (run_file.ACTIVE, run_file.DRAFT):
            code = run_file.read(self.run_dir / name)
            if code is None or not code.strip() or code == self._proposed_code:
                continue
            reader = self.reader("misc")
            if reader.call(harness_code_known, code) or reader.call(code_proposed, code):
                continue  # a stored version (the engine wrote it), or proposed already
            try:
                ast.parse(code)
            except SyntaxError as e:
                self.call_from_thread(self.notify, f"{name} line {e.lineno}: {e.msg}; not proposed yet",
                                      title="Harness edit", severity="warning")
                continue
            self._proposed_code = code
            self._write_command("propose_edit", {"code": code})
            return

    # ------------------------------------------------------------ commands
    def send_command(self, verb: str, arg: dict | None = None) -> None:
        """Queue an operator command; `CommandSent` follows, then `CommandAcknowledged`."""
        self._command_worker(verb, arg or {})

    @work(thread=True, group="commands", exit_on_error=False)
    def _command_worker(self, verb: str, arg: dict) -> None:
        self._write_command(verb, arg)

    def _write_command(self, verb: str, arg: dict) -> None:
        with self._write_lock:
            if self._writer is None:
                from backend.store import Store  # sqlite-utils: loaded on the first command, not at start

                self._writer = Store.open(self.run_dir / "run.db", create=False)
            cid = self._writer.send_command(verb, arg, source="tui")
        self.post_message(CommandSent(cid, verb, arg))

    def close_sync(self) -> None:
        for reader in self._readers.values():
            reader.interrupt()
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    # ------------------------------------------------------------ errors
    def report_worker_error(self, event: Worker.StateChanged) -> None:
        """The one place worker failures become a notification (a cancelled query is not one)."""
        if event.worker.group == "poll" and event.state in (WorkerState.SUCCESS, WorkerState.ERROR):
            self._after_poll()
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if isinstance(error, sqlite3.OperationalError) and "interrupt" in str(error):
            return
        self.notify(f"{type(error).__name__}: {error}", title=f"{event.worker.name} failed", severity="error")


def worker_cancelled() -> bool:
    try:
        return get_current_worker().is_cancelled
    except RuntimeError:
        return False
