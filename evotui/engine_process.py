"""The engine's OS process, seen from the TUI: start it, resume it, and tell whether it lives.

The engine always runs in its own session (`start_new_session=True`) with its
output appended to `RUN_DIR/engine.log` (for a new run, to a file beside
RUN_DIR until the engine has created it; see `startup_log`), so closing the
terminal or the TUI leaves it running; `evotui open RUN_DIR` attaches again.
The app and its widgets import `EngineHealth` from here; the entry points that
open the app are in launch.py, above it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from backend.store.reader import RunDB, RunNotReadable, tail_file

START_TIMEOUT_S = 600.0  # the engine loads the model before it creates run.db


@dataclass(frozen=True)
class EngineHealth:
    """Whether the engine process is alive, and what to say if it is not."""

    dead: bool = False
    message: str = ""
    detail: tuple[str, ...] = ()
    memory: str = ""
    resumable: bool = False


class EngineProbe:
    """Looks at the engine process from outside: alive? how much memory? (tests pass a fake)."""

    def alive(self, pid: int | None) -> bool:
        if not pid:
            return False
        try:
            os.kill(int(pid), 0)
        except PermissionError:
            return True  # exists, owned by someone else
        except (OSError, OverflowError, ValueError):
            return False
        return True

    def memory(self, pid: int | None) -> str:
        return gpu_memory(pid) or rss_memory(pid)


_NVML: list = []  # [pynvml] once initialised, [None] when unavailable


def _nvml():
    if not _NVML:
        try:
            import pynvml  # optional: the `gpu` extra (nvidia-ml-py)

            pynvml.nvmlInit()
            _NVML.append(pynvml)
        except Exception:  # not installed, no driver, no device
            _NVML.append(None)
    return _NVML[0]


def gpu_memory(pid: int | None) -> str:
    """GPU memory via nvidia-ml-py when it is installed and a GPU is present, else ''."""
    pynvml = _nvml()
    if pynvml is None:
        return ""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        used = info.used
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if pid and proc.pid == pid and proc.usedGpuMemory:
                used = proc.usedGpuMemory
        return f"GPU {used / 2**30:.1f}/{info.total / 2**30:.0f} GiB"
    except Exception:  # no driver, no device: fall back to RSS
        return ""


def rss_memory(pid: int | None) -> str:
    """Resident memory of a process from /proc (Linux), else ''."""
    if not pid:
        return ""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return f"RSS {int(line.split()[1]) / 2**20:.2f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return ""


def engine_health(run: dict, run_dir: Path, probe: EngineProbe) -> EngineHealth:
    """Dead when the run says crashed, or says running/paused but its pid is gone."""
    status, pid = run.get("status"), run.get("pid")
    alive = probe.alive(pid) if pid else False
    memory = probe.memory(pid) if alive else ""
    if status == "crashed":
        message = "The engine crashed."
    elif status in ("running", "paused") and pid and not alive:
        message = f"The engine (pid {pid}) is gone: the run says {status} but no process runs it."
    else:
        return EngineHealth(memory=memory, resumable=status == "stopped")
    tail = tuple(tail_file(Path(run_dir) / "engine.log", 4))
    if run.get("error"):
        tail = tail + (f"runs.error: {run['error']}",)
    return EngineHealth(dead=True, message=message, detail=tail[-4:], resumable=True)


# ---------------------------------------------------------------- processes


def _spawn(log_path: Path, args: list[str]) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()


def startup_log(run_dir: Path) -> Path:
    """Where a new run's engine output goes until the run directory exists.

    The engine creates RUN_DIR atomically (built under a temporary name, then
    renamed), so nothing may be put inside it first; `adopt_log` then moves this
    file to RUN_DIR/engine.log. The engine keeps writing to the same open file.
    """
    return run_dir.parent / f".{run_dir.name}.engine.log"


def adopt_log(run_dir: Path) -> None:
    src, dst = startup_log(run_dir), run_dir / "engine.log"
    if src.exists() and run_dir.is_dir() and not dst.exists():
        os.replace(src, dst)


def start_engine(run_dir: Path, extra_args: list[str]) -> subprocess.Popen:
    """A new run in the background; output goes to `startup_log(run_dir)`, then RUN_DIR/engine.log."""
    return _spawn(startup_log(Path(run_dir)), ["--run-dir", str(run_dir), *extra_args])


def resume_engine(run_dir: Path) -> subprocess.Popen:
    """Continue a stopped or crashed run in the background; output appended to RUN_DIR/engine.log."""
    return _spawn(Path(run_dir) / "engine.log", ["--resume", str(run_dir)])


def _run_ready(run_dir: Path) -> bool:
    if not (run_dir / "run.db").exists():
        return False
    try:
        db = RunDB(run_dir)
        try:
            return db.get("runs", 1) is not None
        finally:
            db.close()
    except (RunNotReadable, sqlite3.Error):  # half-created: try again
        return False


def wait_for_run(run_dir: Path, proc: subprocess.Popen, timeout: float = START_TIMEOUT_S) -> int | None:
    """Block until the engine has created the run; returns its exit code if it died first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _run_ready(run_dir):
            return None
        code = proc.poll()
        if code is not None:
            return code
        time.sleep(0.2)
    return None
