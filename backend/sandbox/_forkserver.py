"""Sandbox side of a warm pool worker: confine once, then fork a confined child per job.

Run as a script (`python -I -B _forkserver.py SPEC.json`), never imported by
the trusted process. It enters the same namespaces and private read-only root
as `_launcher.py` (ns mode only), with a tmpfs for the jobs' folders under its /tmp,
preloads the modules a job's driver imports, and answers one JSON request a
line on stdin with one reply a line on stdout. Per job it forks:

- C1 (trusted, this code): new mount, pid, network, ipc and uts namespaces, so
  nothing a job leaves (processes, shared memory, a hostname) outlives it;
  forks C2 and relays its status, killing it on SIGTERM (the wall clock).
- C2, pid 1 of the job's own pid namespace: a fresh /tmp and /proc, the job's
  work dir bound at /sandbox, the pool's folder unmounted, stdio to the job's files, every
  other descriptor closed; then the same uid drop, rlimits and no_new_privs as
  the launcher, every capability dropped (checked), the scrubbed environment,
  and only then the untrusted `main` in this already started interpreter.

So a job costs two forks instead of an interpreter start plus a root build.
The interpreter's hash seed is the worker's, shared by the jobs it runs.
"""

import base64
import ctypes
import io
import json
import os
import resource
import runpy
import select
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _launcher as L  # noqa: E402
from _output import read_capped  # noqa: E402

del sys.path[0]

MNT_DETACH = 2
CAP_VERSION_3 = 0x20080522


def drop_caps() -> None:
    """Clear every capability set (a user-namespace root keeps them across fork) and check."""
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    L.check(L.libc.capset(header, data), "capset")
    with open("/proc/self/status") as f:
        eff = [ln.split()[1] for ln in f if ln.startswith(("CapEff:", "CapPrm:"))]
    if len(eff) != 2 or any(int(v, 16) for v in eff):
        L.fail(f"capabilities remain: {eff}")


def stdio(spec: dict, job: dict) -> None:
    """The job's stdin, stdout and stderr (files the host reads), and no other descriptor."""
    base = spec["pool_dir"] + "/" + job["name"]
    fds = (os.open(base + "/stdin", os.O_RDONLY),  # empty for none: /dev/null is no device in here
           os.open(base + "/stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
           os.open(base + "/stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def enter_job(spec: dict, job: dict) -> None:
    """C2: the job's private view of the root (its work dir, /tmp, /proc), then its uid, limits, no capabilities."""
    base = spec["pool_dir"] + "/" + job["name"]
    L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
    L.bind(base + "/work", spec["job_workdir"], readonly=False)
    L.check(L.libc.umount2(spec["pool_dir"].encode(), MNT_DETACH), "umount the pool")
    while L.libc.umount2(spec["pool_dir"].encode(), MNT_DETACH) == 0:  # and the host folder under it
        pass
    # A fresh /tmp covers the read-only binds under it (a pythonpath in the host's /tmp, with
    # its hidden paths): carry them over by descriptor, as the launcher binds them into its /tmp.
    under_tmp = [(p, os.open(p, os.O_PATH)) for p in spec["ro_binds"] if p.startswith("/tmp/") and os.path.exists(p)]
    L.mount("tmpfs", "/tmp", "tmpfs", L.MS_NOSUID | L.MS_NODEV, f"size={spec['tmp_mb']}m,mode=1777")
    for path, fd in under_tmp:
        L.bind(f"/proc/self/fd/{fd}", path, readonly=True)
        os.close(fd)
    L.libc.mount(b"proc", b"/proc", b"proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC, None)
    os.chdir(spec["job_workdir"])
    L.drop_and_limit(dict(uid=spec.get("uid"), gid=spec.get("gid"), limits=job["limits"]))
    drop_caps()


def run_main(spec: dict, job: dict) -> int:
    """Run the job's program as `python -I -B main.py ARGV` would; return its exit status."""
    os.environ.clear()
    os.environ.update(spec["env"])
    sys.argv = [job["main"]] + job["argv"]
    sys.path[:0] = spec["job_paths"]
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), "utf-8", "surrogateescape")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), "utf-8", "surrogateescape")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), "utf-8",
                                                   "backslashreplace", line_buffering=True)
    code = 0
    try:
        runpy.run_path(job["main"], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    for end in (_threads_and_atexit, sys.stdout.flush, sys.stderr.flush):
        try:
            end()
        except BaseException:
            code = code or 120
    return code & 0xFF


def _threads_and_atexit() -> None:
    import atexit

    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()


def job_process(spec: dict, job: dict) -> None:
    """C1 then C2 (never returns)."""
    try:
        L.check(L.libc.unshare(L.CLONE_NEWNS | L.CLONE_NEWPID | L.CLONE_NEWNET | L.CLONE_NEWIPC
                               | L.CLONE_NEWUTS), "unshare")
        signal.signal(signal.SIGTERM, L._on_term)
        pid = os.fork()
        if pid:
            L._child["pid"] = pid
            if L._child["term"]:
                os.kill(pid, signal.SIGKILL)
            L.relay(pid)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stdio(spec, job)
        enter_job(spec, job)
    except BaseException as e:  # before the untrusted code: a broken sandbox, not a failing program
        L.fail(f"{type(e).__name__}: {e}")
    os._exit(run_main(spec, job))


def wait_job(pid: int, timeout_s: float) -> tuple[int, bool]:
    """Wait for C1 up to the wall clock; past it, SIGTERM (C1 kills the job's pid 1), then SIGKILL."""
    if not exited(pid, timeout_s):
        os.kill(pid, signal.SIGTERM)
        if not exited(pid, 2.0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise RuntimeError("a job's relay did not stop")  # its pid 1 may live: this worker is done
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), False


def exited(pid: int, timeout_s: float) -> bool:
    """Whether child `pid` exits within `timeout_s` (left to reap): woken by its pidfd where the
    kernel has them, else polled."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    deadline = time.monotonic() + timeout_s
    try:
        pause = 0.001
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(pause, left))
                pause = min(pause * 1.5, 0.02)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def prepare(spec: dict, job: dict) -> str:
    """The job's folder in the pool: work/ with its files (owned by the job's uid), stdin, and
    empty stdout and stderr that only this side can read. Returns the folder."""
    base = spec["pool_dir"] + "/" + job["name"]
    work = base + "/work"
    os.mkdir(base, 0o711)
    os.mkdir(work)
    for rel, content in {**job["files"], job["main"]: job["code"]}.items():
        dst = os.path.realpath(os.path.join(work, rel))
        if not dst.startswith(work + "/"):
            raise ValueError(f"file path escapes the work dir: {rel}")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(base64.b64decode(content["b64"]) if isinstance(content, dict) else content.encode())
    with open(base + "/stdin", "w") as f:
        f.write(job["stdin"])
    for name in ("stdout", "stderr"):
        os.close(os.open(base + "/" + name, os.O_WRONLY | os.O_CREAT, 0o600))
    if spec.get("uid") is not None:
        for dirpath, _dirs, names in os.walk(work):
            os.chown(dirpath, spec["uid"], spec["gid"])
            for n in names:
                os.chown(os.path.join(dirpath, n), spec["uid"], spec["gid"], follow_symlinks=False)
    return base


def run_job(spec: dict, job: dict) -> dict:
    """Prepare, fork, wait, read the output, remove the folder: the reply for one job."""
    try:
        base = prepare(spec, job)
    except (OSError, ValueError) as e:
        shutil.rmtree(spec["pool_dir"] + "/" + job["name"], ignore_errors=True)
        return {"prepare_error": f"{type(e).__name__}: {e}"}
    pid = os.fork()
    if pid == 0:
        job_process(spec, job)
    rc, timed_out = wait_job(pid, job["timeout_s"])
    while True:  # reap anything reparented to us (nothing should be)
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    out, out_cut = read_capped(base + "/stdout", job["max_output"])
    err, err_cut = read_capped(base + "/stderr", job["max_output"])
    shutil.rmtree(base, ignore_errors=True)
    return {"rc": rc, "timed_out": timed_out, "stdout": out, "stderr": err, "truncated": out_cut or err_cut}


def serve(spec: dict, requests, reply_fd: int) -> None:
    for mod in spec.get("preload", []):
        __import__(mod)
    os.write(reply_fd, b'{"ready": true}\n')
    for line in requests:
        job = json.loads(line)
        reply = dict(run_job(spec, job), name=job["name"])
        data = (json.dumps(reply) + "\n").encode()
        while data:
            data = data[os.write(reply_fd, data):]


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    requests = os.fdopen(os.dup(0), "rb")
    reply_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    L.enter_namespaces(spec)  # the caller stays outside as the relay; this is pid 1 of the worker's namespace
    # The jobs' folders live in memory, never on the host's disk (whose unlinks cost milliseconds).
    L.mount("tmpfs", spec["pool_dir"], "tmpfs", L.MS_NOSUID | L.MS_NODEV, f"size={spec['pool_mb']}m,mode=0711")
    serve(spec, requests, reply_fd)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        import traceback

        where = traceback.extract_tb(e.__traceback__)[-1]
        L.fail(f"{type(e).__name__}: {e} (in {where.name}, line {where.lineno})")
