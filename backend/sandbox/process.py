"""A long-lived sandboxed Python process that talks over its stdin and stdout.

`run_python` runs a program to its end; some untrusted work is a service
instead (the harness worker answers many requests over a run). `spawn` starts
`main` in the same sandbox as `run_python` (namespaces, private read-only
root, scrubbed environment, rlimits, a fresh uid) with pipes for stdin and
stdout; `close` kills it with everything it started and removes its files.

    >>> p = spawn("import sys; sys.stdout.write(sys.stdin.readline())")
    >>> p.proc.stdin.write(b"hi\\n"); p.proc.stdin.flush(); p.proc.stdout.readline()
    b'hi\\n'
    >>> p.close()
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _modes
from . import LAUNCHER, _force_remove, _prepare, _spec, sandbox_mode


class SandboxProcess:
    """A running sandboxed process: `proc` (a Popen with binary stdin/stdout pipes),
    `stderr_path` (its captured stderr), and `close()`."""

    def __init__(self, proc: subprocess.Popen, job: Path, uid: int | None, namespaces: bool, mode: str):
        self.proc, self.job, self.uid, self.namespaces, self.mode = proc, job, uid, namespaces, mode
        self.stderr_path = job / "stderr"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, n: int = 300) -> str:
        try:
            data = self.stderr_path.read_bytes()[-n:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def close(self) -> None:
        """Kill the process and all it started; release its uid; remove its files."""
        if self.proc.poll() is None and self.namespaces:
            try:  # the launcher kills and reaps the namespace's init on SIGTERM
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.namespaces:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            _modes.reap_group(self.proc.pid)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe and pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.uid is not None:
            _modes.reap_uid(self.uid)
            _modes.release_uid(self.uid)
            self.uid = None
        shutil.rmtree(self.job, onerror=_force_remove)


def spawn(code: str, *, files: dict[str, str] | None = None, pythonpath: list[str] | None = None,
          memory_mb: int = 2048, cpu_s: float = 7 * 24 * 3600, max_procs: int = 32, max_file_mb: int = 16,
          main: str = "main.py") -> SandboxProcess:
    """Start `code` as `main` in a fresh sandboxed work dir; raises OSError if it cannot start.

    pythonpath: directories made importable (read-only binds in ns mode).
    cpu_s: the whole process's CPU limit (a service limits its own requests further).
    """
    mode = sandbox_mode()
    uid = _modes.acquire_uid() if mode.drop_uid else None
    job = Path(tempfile.mkdtemp(prefix="evotui-svc-"))
    try:
        work = _prepare(job, code, files, None, main, uid)
        spec = _spec(mode, job, work, main, [], pythonpath or [], [], uid,
                     dict(memory_mb=int(memory_mb), file_mb=int(max_file_mb), nofile=256,
                          cpu_s=max(1, int(cpu_s)), nproc=_modes.nproc_limit(max_procs, uid)))
        (job / "spec.json").write_text(json.dumps(spec))
        with open(job / "stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", LAUNCHER, str(job / "spec.json")],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    env={"LANG": "C.UTF-8"}, cwd=str(job), start_new_session=True, close_fds=True)
    except BaseException:
        if uid is not None:
            _modes.release_uid(uid)
        shutil.rmtree(job, onerror=_force_remove)
        raise
    return SandboxProcess(proc, job, uid, mode.namespaces, mode.name)
