"""The TUI's entry points: attach to a run, or start one and attach.

    open_tui(run_dir)                   attach to a running or finished run (never kills it)
    start_and_open(run_dir, extra)      start `evotui run --headless`, open the TUI, and on
                                        quit ask whether to stop the run or leave it running
    require_terminal(hint)              refuse, before anything starts, where there is no terminal

Starting and watching the engine process is engine_process.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from backend.errors import UsageError
from backend.store.reader import RunDB, RunNotReadable, tail_file
from evotui.app import EvoApp
from evotui.engine_process import adopt_log, start_engine, startup_log, wait_for_run


def require_terminal(hint: str) -> None:
    """The TUI reads keys from standard input and draws on standard output: both must be a
    terminal. Without one (`nohup`, cron, a pipe, a file) it would write escape codes into the
    file, and Textual's input thread re-reads an input at its end without pause, a whole core
    taken from the run. `hint`: what to do instead, for the one line the CLI prints (exit 2)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(f"the TUI needs a terminal, and standard input or output is not one here; {hint}")


def open_tui(run_dir: Path, owns_engine: bool = False, engine_proc: subprocess.Popen | None = None) -> int:
    """Attach the TUI to a run (running, paused, finished or crashed). Never stops it. `engine_proc`:
    the engine this process started (the app reaps it when it exits)."""
    try:
        RunDB(run_dir).close()
    except RunNotReadable as e:
        print(e.cli_line(), file=sys.stderr)
        return 2
    require_terminal(f"read the run without it: evotui report {run_dir}")
    app = EvoApp(Path(run_dir), owns_engine=owns_engine, warm_start=True, engine_proc=engine_proc)
    app.run()
    line = exit_line(run_dir, app.exit_status, app.stop_requested, app.owns_engine, app.engine_dead_on_exit)
    if line:
        print(line, file=sys.stderr)
    return app.return_code or 0


def exit_line(run_dir: Path, status: str | None, stop_requested: bool, owns_engine: bool, dead: bool) -> str | None:
    """What the terminal says about the run once the TUI has closed: only what is true of it.

    >>> exit_line(Path("r"), "stopped", True, True, False)
    'the run has stopped, state saved; go on with: evotui run --headless --resume r'
    """
    if status in ("stopped", "finished", "crashed"):
        then = f"go on with: evotui run --headless --resume {run_dir}" if status != "finished" else \
            f"report: evotui report {run_dir}"
        return f"the run has {status}{', state saved' if status == 'stopped' else ''}; {then}"
    if stop_requested:
        return f"stop requested; the engine stops at its next checkpoint, state saved ({run_dir})"
    if owns_engine and not dead:
        return f"the run goes on in the background; attach with: evotui open {run_dir}"
    return None


def start_and_open(run_dir: Path, extra_args: list[str]) -> int:
    """Start a new run in the background and open the TUI on it."""
    run_dir = Path(run_dir)
    require_terminal("run without it: evotui run --headless (the same options)")
    proc = start_engine(run_dir, extra_args)
    print(f"starting the engine (pid {proc.pid}); log: {startup_log(run_dir)}", file=sys.stderr)
    print("waiting for it to load the model and create the run ...", file=sys.stderr)
    try:
        code = wait_for_run(run_dir, proc)
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        print("interrupted before the run started; the engine was asked to stop", file=sys.stderr)
        return 130
    if code is not None or not (run_dir / "run.db").exists():
        log = startup_log(run_dir) if startup_log(run_dir).exists() else run_dir / "engine.log"
        print(f"the engine exited before the run started ({log}):", file=sys.stderr)
        for line in tail_file(log, 15):
            print("  " + line, file=sys.stderr)
        return code or 1
    adopt_log(run_dir)
    return open_tui(run_dir, owns_engine=True, engine_proc=proc)
