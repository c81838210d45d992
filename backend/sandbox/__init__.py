"""Run untrusted Python (model-written code, candidate harnesses) in a sandbox.

Every run gets a fresh temporary directory, a scrubbed environment (HOME is
the work dir, no PYTHON* variables), CPU-time, wall-time, memory, process,
open-file and file-size limits, and, where the OS allows it, its own network,
mount and pid namespaces with a read-only view of only the system and Python
directories. `isolation_report()` says which of these hold on this machine.

A run never raises for anything the code does: the result is a status
(passed, failed, error, timeout, memory, crashed) plus captured output.

    >>> r = run_python("print(1 + 1)")
    >>> r.status, r.stdout
    ('passed', '2\\n')
    >>> [x.status for x in run_many([{"code": "assert 0"}, {"code": "while 1: pass", "timeout_s": 1}])]
    ['failed', 'timeout']
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import _modes
from ._modes import CANDIDATES, IS_ROOT, Mode
from ._output import read_capped as _read

LAUNCHER = str(Path(__file__).with_name("_launcher.py"))
INNER_WORKDIR = "/sandbox"
SETUP_FAILED = 121
STATUSES = ("passed", "failed", "error", "timeout", "memory", "crashed")


@dataclass
class SandboxResult:
    status: str
    """passed (exit 0), failed (AssertionError), error (other exception or
    non-zero exit), timeout (wall or CPU limit), memory (MemoryError),
    crashed (killed by a signal, or the sandbox itself could not start)."""
    returncode: int | None
    stdout: str
    stderr: str
    duration_ms: int
    detail: dict = field(default_factory=dict)
    """error_type / error (last exception line), signal, limit, truncated, mode."""

    def to_dict(self) -> dict:
        return asdict(self)


def run_python(code: str, *, files: dict[str, str | bytes] | None = None, timeout_s: float = 5.0,
               memory_mb: int = 512, cpu_s: float | None = None, max_procs: int = 16,
               max_file_mb: int = 16, cwd_files_dir: str | os.PathLike | None = None,
               argv: list[str] | None = None, stdin: str | None = None,
               pythonpath: list[str] | None = None, hide: list[str] | None = None,
               main: str = "main.py", max_output: int = 20_000) -> SandboxResult:
    """Run `code` as `main` in a fresh work dir holding `files` (relative
    path -> text) and a copy of `cwd_files_dir`; return a SandboxResult.

    pythonpath: extra directories made importable (read-only binds in ns mode).
    hide: host paths that must be invisible inside (e.g. hidden tests), even
    when they sit under a directory the sandbox can read (ns mode only).
    max_procs counts every process and thread of the run, the main one included.
    """
    start = time.monotonic()
    mode = sandbox_mode()
    job: Path | None = None
    uid = _modes.acquire_uid() if mode.drop_uid else None
    try:
        job = Path(tempfile.mkdtemp(prefix="evotui-sbx-"))  # inside: a full disk is a result too
        work = _prepare(job, code, files, cwd_files_dir, main, uid)
        spec = _spec(mode, job, work, main, argv or [], pythonpath or [], hide or [], uid,
                     dict(memory_mb=int(memory_mb), file_mb=int(max_file_mb), nofile=256,
                          cpu_s=max(1, int(-(-(cpu_s or timeout_s) // 1))),
                          nproc=_modes.nproc_limit(max_procs, uid)))
        (job / "spec.json").write_text(json.dumps(spec))
        rc, timed_out = _execute(job, stdin, timeout_s, graceful=mode.namespaces)
        out, out_cut = _read(job / "stdout", max_output)
        err, err_cut = _read(job / "stderr", max_output)
    except Exception as e:  # the sandbox's own failure is a result too
        return SandboxResult("crashed", None, "", "", _ms(start),
                             {"sandbox_error": f"{type(e).__name__}: {e}", "mode": mode.name})
    finally:
        if uid is not None:
            _modes.reap_uid(uid)
            _modes.release_uid(uid)
        if job is not None:
            shutil.rmtree(job, onerror=_force_remove)
    status, detail = classify(rc, timed_out, err, spec["limits"]["cpu_s"], _ms(start))
    detail.update(mode=mode.name, **({"truncated": True} if out_cut or err_cut else {}))
    return SandboxResult(status, rc, out, err, _ms(start), detail)


def run_many(jobs: list[dict], max_workers: int | None = None) -> list[SandboxResult]:
    """Run `run_python(**job)` for every job on a thread pool (each job is its
    own process, so this uses all cores); results come back in job order."""
    jobs = list(jobs)
    if not jobs:
        return []
    workers = max(1, min(len(jobs), max_workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda j: run_python(**j), jobs))


# ---------------------------------------------------------------- the mode this machine allows
# Chosen by trying: the probe is a run of `run_python` under each candidate mode in turn,
# so the choice lives here, beside `run_python`, and `_modes` runs nothing.

_lock = threading.RLock()
_chosen: Mode | None = None
_trying: Mode | None = None
_failures: dict[str, str] = {}


def sandbox_mode() -> Mode:
    """The strongest mode that works here (probed once per process)."""
    global _chosen, _trying
    if _chosen is not None:
        return _chosen
    with _lock:
        if _trying is not None:  # the probe run itself, re-entering on this thread
            return _trying
        if _chosen is not None:
            return _chosen
        forced = os.environ.get("EVOTUI_SANDBOX_MODE", "")
        order = [forced] if forced in CANDIDATES else (["ns", "uid", "plain"] if IS_ROOT else ["ns", "plain"])
        for name in order:
            _trying = CANDIDATES[name]
            try:
                r = run_python("print('ok')", timeout_s=20)
            finally:
                _trying = None
            if r.status == "passed" and r.stdout.strip() == "ok":
                _chosen = CANDIDATES[name]
                break
            _failures[name] = (r.detail.get("sandbox_error") or r.stderr.strip()[-300:] or r.status)
        else:
            _chosen = CANDIDATES["plain"]
        return _chosen


_PROBE = """
import json, os, socket, sys
def can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
print(json.dumps({"uid": os.getuid(), "pid": os.getpid(), "cwd": os.getcwd(),
    "interfaces": [n for _, n in socket.if_nameindex()],
    "host_loopback_reachable": can_connect(int(sys.argv[1])),
    "sees_parent_dir": os.path.exists(sys.argv[2])}))
"""


def isolation_report() -> dict:
    """What a sandboxed run is isolated from on this machine, measured by a
    probe run (not assumed): mode, network, filesystem, processes, user."""
    import socket

    mode = sandbox_mode()
    with socket.socket() as srv:  # a listener the sandbox must not reach
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        r = run_python(_PROBE, argv=[str(srv.getsockname()[1]), os.path.dirname(os.path.abspath(__file__))])
    try:
        facts = json.loads(r.stdout)
    except ValueError:
        facts = {"probe_error": r.status + ": " + (r.stderr or "")[-300:]}
    net_ok = mode.namespaces and not facts.get("host_loopback_reachable", True)
    fs_private = mode.namespaces and not facts.get("sees_parent_dir", True)
    return {
        "mode": mode.name,
        "running_as_root": IS_ROOT,
        "network_isolated": net_ok,
        "network": ("new network namespace: no interfaces up, host loopback unreachable" if net_ok
                    else "NOT isolated: the sandbox shares the host network"),
        "filesystem_private": fs_private,
        "filesystem": ("private root: system and Python dirs read-only, work dir at /sandbox, "
                       "small /tmp, hidden paths masked" if fs_private else
                       f"NOT private: the whole filesystem is visible with the permissions of uid "
                       f"{facts.get('uid', '?')}; only the work dir and HOME are the sandbox's own"),
        "pid_namespace": mode.namespaces and facts.get("pid") == 1,
        "uid": ("a fresh unprivileged uid per concurrent run" if mode.drop_uid
                else f"your own uid ({os.getuid()})" + ("; as root RLIMIT_NPROC does not bind, so only "
                                                       "the wall clock stops a fork bomb" if IS_ROOT else "")),
        "limits": "RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE, wall clock "
                  "(process group killed), no core dumps, no_new_privs",
        "env": "scrubbed: PATH, HOME (= work dir), TMPDIR, LANG only; python -I",
        "probe": facts,
        "rejected_modes": dict(_failures),
    }


def classify(rc: int | None, timed_out: bool, stderr: str, cpu_s: int, ms: int) -> tuple[str, dict]:
    """Map an exit to a status. The exception type is read from the last line
    of the traceback, so a program can fake it: statuses are evidence, and
    evaluators that grant a pass check a secret of their own as well."""
    if timed_out:
        return "timeout", {"limit": "wall"}
    if rc is None:
        return "crashed", {"sandbox_error": "no exit status"}
    if rc < 0:
        sig = -rc
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and ms >= cpu_s * 1000):
            return "timeout", {"limit": "cpu", "signal": name}
        return "crashed", {"signal": name}
    if rc == SETUP_FAILED and stderr.startswith("sandbox setup failed"):
        return "crashed", {"sandbox_error": stderr.strip().splitlines()[0][:300]}
    if rc == 0:
        return "passed", {}
    exc = _last_exception(stderr)
    if exc is None:
        return "error", {"error_type": "ExitCode", "error": f"exit status {rc}"}
    etype, msg = exc
    detail = {"error_type": etype, "error": msg[:500]}
    if etype == "MemoryError":
        return "memory", detail
    if etype == "AssertionError":
        return "failed", detail
    return "error", detail


def _last_exception(stderr: str) -> tuple[str, str] | None:
    if "Traceback (most recent call last)" not in stderr:
        return None
    for line in reversed(stderr.rstrip().splitlines()):
        if line and not line[0].isspace():
            head, _, msg = line.partition(": ")
            name = head.rsplit(".", 1)[-1]
            if name.isidentifier():
                return name, msg.strip()
            return None
    return None


# ---------------------------------------------------------------- internals


def _prepare(job: Path, code: str, files, cwd_files_dir, main: str, uid: int | None) -> Path:
    work = job / "work"
    if cwd_files_dir:
        # links stay links: following them here would copy host files the sandbox cannot read
        shutil.copytree(cwd_files_dir, work, symlinks=True, dirs_exist_ok=True)
    work.mkdir(exist_ok=True)
    for rel, content in {**(files or {}), main: code}.items():
        dst = (work / rel).resolve()
        if not dst.is_relative_to(work.resolve()):
            raise ValueError(f"file path escapes the work dir: {rel}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        (dst.write_bytes if isinstance(content, bytes) else dst.write_text)(content)
    (job / "root").mkdir()
    # The job dir is traversable but not listable, so a dropped uid reaches
    # only its work dir, never the spec or the captured output.
    os.chmod(job, 0o711)
    if uid is not None:
        for dirpath, _dirs, names in os.walk(work):
            os.chown(dirpath, uid, uid)
            for n in names:
                os.chown(os.path.join(dirpath, n), uid, uid, follow_symlinks=False)
    return work


def _spec(mode, job: Path, work: Path, main: str, argv, pythonpath, hide, uid, limits) -> dict:
    inner = INNER_WORKDIR if mode.namespaces else str(work)
    paths = [inner] + [str(Path(p).resolve()) for p in pythonpath]
    boot = (f"import sys, runpy; sys.path[:0] = {paths!r}; sys.argv = [{main!r}] + sys.argv[1:]; "
            f"runpy.run_path({main!r}, run_name='__main__')")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": inner, "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp" if mode.namespaces else inner,
           # one BLAS/OpenMP thread: a pool per core would run into max_procs
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return {
        "mode": mode.name, "userns": mode.userns, "root": str(job / "root"), "workdir": str(work),
        "inner_workdir": inner, "ro_binds": _modes.ro_binds(pythonpath), "tmp_mb": 64,
        "hide": [str(Path(p).resolve()) for p in hide], "uid": uid, "gid": uid,
        "python": sys.executable, "argv": [sys.executable, "-I", "-B", "-c", boot, *argv],
        "env": env, "limits": limits,
    }


def _execute(job: Path, stdin: str | None, timeout_s: float, graceful: bool) -> tuple[int | None, bool]:
    if stdin is not None:
        (job / "stdin").write_text(stdin)
    with open(job / "stdout", "wb") as out, open(job / "stderr", "wb") as err, \
            open(job / "stdin" if stdin is not None else os.devnull, "rb") as inp:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", LAUNCHER, str(job / "spec.json")],
                                stdin=inp, stdout=out, stderr=err, env={"LANG": "C.UTF-8"},
                                cwd=str(job), start_new_session=True, close_fds=True)
    timed_out = not _wait_exit(proc.pid, timeout_s)
    if timed_out and graceful:
        # The launcher kills and reaps the namespace's init itself on SIGTERM.
        os.kill(proc.pid, signal.SIGTERM)
        _wait_exit(proc.pid, 2.0)
    if graceful:  # the pid namespace is gone with its init; one kill covers the launcher
        _killpg(proc.pid)
    else:
        _modes.reap_group(proc.pid)  # no pid namespace: repeat until forks stop appearing
    return proc.wait(), timed_out


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Poll until `pid` exits (True) or the time is up (False). WNOWAIT keeps
    the exited leader a zombie until its process group has been killed, so
    the group id cannot meanwhile be reused by an unrelated process."""
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 1.5, 0.02)
    return True


def _force_remove(func, path, _exc_info):
    # A sandboxed program may chmod its files to 000; make them removable.
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
