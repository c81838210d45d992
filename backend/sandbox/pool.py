"""A pool of warm sandbox workers: `run_many` without an interpreter start per job.

Each worker is a long-lived fork server (`_forkserver.py`) inside the same
namespaces, private read-only root and hidden paths as a `run_python` run; it
forks a fresh confined child per job (its own pid, mount, network, ipc and uts
namespaces, /tmp, work dir at /sandbox, the uid, rlimits and no_new_privs of a
fresh run, no capabilities), so a job costs a fork instead of a process start
and a root build. Results are the same `SandboxResult`s, classified the same way.
Two things differ from a fresh run: the jobs of one worker share its interpreter's
hash seed, and their work dirs live on the worker's tmpfs (POOL_MB in all) rather
than on the host's disk.

A worker that dies, hangs past a job's wall clock or answers nonsense is closed
(with everything it started) and the job is retried once on a fresh worker;
a second failure is a "crashed" result with the reason, never a lost one.
Jobs the pool cannot take exactly as `run_python` would (another `hide` or
`pythonpath`, a `cwd_files_dir`, or a machine without namespaces) run through
`run_python` itself, and so does every job once a worker fails to start or
the pool's first probe job fails on it (`start_error` says why). `close()` ends
every worker; so do dropping the pool and the host's exit.

    >>> with SandboxPool(2) as pool:
    ...     [r.status for r in pool.run_many([{"code": "print(1)"}, {"code": "assert 0"}])]
    ['passed', 'failed']
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import _modes
from . import INNER_WORKDIR, SandboxResult, _force_remove, _spec, classify, run_python, sandbox_mode
from .process import SandboxProcess

FORKSERVER = str(Path(__file__).with_name("_forkserver.py"))
PRELOAD = ("json", "traceback", "builtins", "pkgutil", "time")
START_TIMEOUT_S = 30.0
POOL_DIR = "/tmp/.evotui-pool"  # inside a worker; each job's fresh /tmp covers it
POOL_MB = 512  # a worker's tmpfs for its job's files (a work dir on disk has no total cap)
REPLY_SLACK_S = 10.0  # past a job's wall clock, how long the worker may take to say so


class WorkerBroken(Exception):
    """A worker stopped answering or died; the job it held has no result from it."""


class Worker:
    """One fork server: start, run one job at a time, close."""

    def __init__(self, hide: list[str], pythonpath: list[str], preload: tuple[str, ...]):
        mode = sandbox_mode()
        uid = _modes.acquire_uid() if mode.drop_uid else None
        home = Path(tempfile.mkdtemp(prefix="evotui-pool-"))
        self.uid, self.home, self.jobs = uid, home, itertools.count()
        try:
            (home / "jobs").mkdir()
            (home / "root").mkdir()
            os.chmod(home, 0o711)
            os.chmod(home / "jobs", 0o711)
            spec = _spec(mode, home, home / "jobs", "main.py", [], pythonpath, hide, uid, {})
            spec.update(inner_workdir=POOL_DIR, pool_dir=POOL_DIR, pool_mb=POOL_MB, mount_points=[INNER_WORKDIR],
                        job_workdir=INNER_WORKDIR, preload=list(preload),
                        job_paths=[INNER_WORKDIR] + [str(Path(p).resolve()) for p in pythonpath])
            (home / "spec.json").write_text(json.dumps(spec))
            with open(home / "stderr", "wb") as err:
                proc = subprocess.Popen([sys.executable, "-I", "-B", FORKSERVER, str(home / "spec.json")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                        env={"LANG": "C.UTF-8"}, cwd=str(home), start_new_session=True,
                                        close_fds=True)
        except BaseException:
            if uid is not None:
                _modes.release_uid(uid)
            shutil.rmtree(home, onerror=_force_remove)
            raise
        self.proc = SandboxProcess(proc, home, uid, mode.namespaces, mode.name)
        self.mode = mode.name
        try:
            if self._reply(START_TIMEOUT_S) != {"ready": True}:
                raise WorkerBroken("no ready line")
        except WorkerBroken as e:
            tail = self.proc.stderr_tail()
            self.close()
            raise WorkerBroken(f"the pool worker did not start: {e}; {tail}") from None

    def _reply(self, timeout_s: float) -> dict:
        out = self.proc.proc.stdout
        ready, _, _ = select.select([out], [], [], timeout_s)
        if not ready:
            raise WorkerBroken("no answer in time")
        line = out.readline()
        if not line:
            raise WorkerBroken(f"the worker exited ({self.proc.proc.poll()})")
        try:
            return json.loads(line)
        except ValueError:
            raise WorkerBroken("an unreadable answer") from None

    def run(self, job: dict) -> SandboxResult:
        """Run one `run_python`-style job; raises WorkerBroken when the worker fails it."""
        start = time.monotonic()
        name = str(next(self.jobs))
        timeout_s = float(job.get("timeout_s", 5.0))
        cpu_s = job.get("cpu_s")
        limits = dict(memory_mb=int(job.get("memory_mb", 512)), file_mb=int(job.get("max_file_mb", 16)),
                      nofile=256, cpu_s=max(1, int(-(-(cpu_s or timeout_s) // 1))),
                      nproc=_modes.nproc_limit(job.get("max_procs", 16), self.uid))
        files = {rel: ({"b64": base64.b64encode(c).decode()} if isinstance(c, bytes) else c)
                 for rel, c in (job.get("files") or {}).items()}
        request = dict(name=name, code=job["code"], files=files, main=job.get("main", "main.py"),
                       argv=[str(a) for a in job.get("argv") or []], stdin=job.get("stdin") or "",
                       timeout_s=timeout_s, limits=limits, max_output=int(job.get("max_output", 20_000)))
        try:
            self.proc.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.proc.stdin.flush()
        except OSError as e:
            raise WorkerBroken(f"cannot send the job: {e}") from None
        answer = self._reply(timeout_s + REPLY_SLACK_S)
        if answer.get("name") != name:
            raise WorkerBroken(f"an answer for another job: {str(answer)[:200]}")
        if "prepare_error" in answer:  # the job's own files are bad (a path that escapes): as run_python says
            return SandboxResult("crashed", None, "", "", _ms(start),
                                 {"sandbox_error": answer["prepare_error"], "mode": self.mode})
        if not isinstance(answer.get("rc"), int):
            raise WorkerBroken(f"an answer without an exit status: {str(answer)[:200]}")
        rc, timed_out, err = answer["rc"], bool(answer.get("timed_out")), answer.get("stderr", "")
        status, detail = classify(rc, timed_out, err, limits["cpu_s"], _ms(start))
        detail.update(mode=self.mode, **({"truncated": True} if answer.get("truncated") else {}))
        return SandboxResult(status, rc, answer.get("stdout", ""), err, _ms(start), detail)

    def alive(self) -> bool:
        return self.proc.alive()

    def close(self) -> None:
        self.proc.close()  # kills the worker's namespace (every job in it), reaps its uid, removes its files


class SandboxPool:
    """Up to `size` warm workers (default: one per core) for jobs with these `hide` and `pythonpath`."""

    def __init__(self, size: int | None = None, *, hide: list[str] | None = None,
                 pythonpath: list[str] | None = None, preload: tuple[str, ...] = PRELOAD):
        self.size = max(1, int(size or len(os.sched_getaffinity(0)) or 1))
        self.hide = sorted(str(Path(p).resolve()) for p in hide or [])
        self.pythonpath = [str(Path(p).resolve()) for p in pythonpath or []]
        self.preload = tuple(preload)
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0
        self.start_error = ""
        self._probe: bool | None = None
        self._check_lock = threading.Lock()
        self._pid = os.getpid()
        # closes the idle workers when the pool is closed, dropped, or the host exits
        self._finalize = weakref.finalize(self, _close_workers, self._idle, self._pid)

    def fits(self, job: dict) -> bool:
        """Whether a worker runs this job exactly as `run_python` would."""
        return (sandbox_mode().namespaces and not job.get("cwd_files_dir")
                and sorted(str(Path(p).resolve()) for p in job.get("hide") or []) == self.hide
                and [str(Path(p).resolve()) for p in job.get("pythonpath") or []] == self.pythonpath)

    def run(self, job: dict) -> SandboxResult:
        """One job's result: on a worker, retried once on a fresh one if its worker fails it."""
        if not self.fits(job) or not self._checked():
            return run_python(**job)
        reason = ""
        for _attempt in range(2):
            try:
                worker = self._take()
            except (OSError, WorkerBroken) as e:
                reason = f"{type(e).__name__}: {e}"
                if self._closed:
                    continue
                self.start_error = reason[:500]  # no worker starts here: every job runs fresh, as before
                return run_python(**job)
            try:
                res = worker.run(job)
            except WorkerBroken as e:
                reason = f"pool worker failed: {e}"
                worker.close()
                with self._lock:
                    self.restarts += 1
                continue
            except BaseException:
                worker.close()
                raise
            self._give(worker)
            return res
        return SandboxResult("crashed", None, "", "", 0, {"sandbox_error": reason[:300], "mode": "pool"})

    def _checked(self) -> bool:
        """Whether this pool's workers run a job right here: checked once, by running one; if
        not, `start_error` says why and every job runs fresh (a new kernel or mode costs speed,
        never verdicts)."""
        with self._check_lock:
            if self._probe is None and not self.start_error:
                try:
                    worker = self._take()
                    r = worker.run({"code": "print('ok')", "timeout_s": 20})
                    self._give(worker)
                    self._probe = r.status == "passed" and r.stdout == "ok\n"
                    if not self._probe:
                        self.start_error = f"a probe job ended {r.status}: {(r.stderr or str(r.detail))[-300:]}"
                except (OSError, WorkerBroken) as e:
                    self.start_error = f"{type(e).__name__}: {e}"[:500]
        return not self.start_error

    def run_many(self, jobs: list[dict]) -> list[SandboxResult]:
        """Every job's result, in job order, `size` at a time."""
        jobs = list(jobs)
        if not jobs:
            return []
        with ThreadPoolExecutor(min(len(jobs), self.size), thread_name_prefix="sandbox-pool") as ex:
            return list(ex.map(self.run, jobs))

    def _take(self) -> Worker:
        with self._lock:
            if self._closed:
                raise OSError("the sandbox pool is closed")
            if self._pid != os.getpid():  # a forked copy of the host: the workers are its parent's
                self._idle.clear()
                self._pid = os.getpid()
                self._finalize.detach()
                self._finalize = weakref.finalize(self, _close_workers, self._idle, self._pid)
            while self._idle:
                w = self._idle.pop()
                if w.alive():
                    return w
                w.close()
                self.restarts += 1
        return Worker(self.hide, self.pythonpath, self.preload)

    def _give(self, worker: Worker) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append(worker)
                return
        worker.close()

    def workers(self) -> list[Worker]:
        with self._lock:
            return list(self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalize()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: dict[tuple[str, ...], SandboxPool] = {}
_shared_lock = threading.Lock()


def shared(hide: list[str]) -> SandboxPool:
    """This process's pool for jobs hiding `hide` (one per core; closed at exit), for callers
    that run many sandboxed jobs over a run without an object of their own to close it."""
    key = tuple(sorted(str(Path(p).resolve()) for p in hide))
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed:
            pool = _shared[key] = SandboxPool(hide=list(key))
        return pool


def _close_workers(idle: list[Worker], owner: int) -> None:
    """Close the workers in `idle` (only in the process that started them)."""
    if os.getpid() != owner:
        return
    while idle:
        try:
            idle.pop().close()
        except IndexError:
            break


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
