"""The isolation modes a sandbox run can use, and the per-run uids that make
process limits and clean-up exact when we are root. Which mode this machine
allows is chosen by trying them (`backend.sandbox.sandbox_mode`, which runs
code, so it lives with `run_python`; this module runs nothing).

Modes, strongest first (the first that runs `print('ok')` wins; set
EVOTUI_SANDBOX_MODE=ns|uid|plain to force one):

- ns:    new mount, network, pid, ipc and uts namespaces (plus a user
         namespace when not root); private read-only root; as root, also a
         fresh uid per concurrent run.
- uid:   root without namespaces: a fresh uid per run (files it cannot read
         stay unreadable), rlimits. Network is NOT isolated.
- plain: rlimits, scrubbed env and a temp work dir only. Network and the
         filesystem are NOT isolated beyond your own permissions.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str
    namespaces: bool
    userns: bool
    drop_uid: bool


IS_ROOT = os.geteuid() == 0
UID_BASE = int(os.environ.get("EVOTUI_SANDBOX_UID_BASE", "1870000000"))
CANDIDATES = {
    "ns": Mode("ns", True, not IS_ROOT, IS_ROOT),
    "uid": Mode("uid", False, False, True),
    "plain": Mode("plain", False, False, False),
}
def ro_binds(pythonpath: list[str]) -> list[str]:
    """Host paths visible read-only inside the private root (ns mode)."""
    system = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache",
              "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd",
              "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/mime.types"]
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                            sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)))}
    python |= {os.path.realpath(p) for p in pythonpath}
    dirs = [p for p in system if os.path.lexists(p)] + sorted(python, key=len)
    out: list[str] = []
    for p in dirs:
        # a path under an already bound directory comes along with it
        if not any(p != q and p.startswith(q.rstrip("/") + "/") and not os.path.islink(q) for q in out):
            out.append(p)
    return out


# ---------------------------------------------------------------- uids

_uid_lock = threading.Lock()
_uids_busy: dict[int, int] = {}  # uid -> fd of its lock file
_LOCK_DIR = os.path.join(tempfile.gettempdir(), "evotui-sandbox-uids")


def acquire_uid() -> int:
    """A uid no other sandbox run on this machine holds: per-uid lock files
    (flock) make the pool safe across processes, not only threads, so one
    process's clean-up never kills another process's job."""
    import fcntl

    os.makedirs(_LOCK_DIR, mode=0o700, exist_ok=True)
    with _uid_lock:
        i = 0
        while True:
            uid = UID_BASE + i
            i += 1
            if uid in _uids_busy:
                continue
            fd = os.open(os.path.join(_LOCK_DIR, f"{uid}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _uids_busy[uid] = fd
            return uid


def release_uid(uid: int) -> None:
    with _uid_lock:
        fd = _uids_busy.pop(uid, None)
    if fd is not None:
        os.close(fd)  # closing drops the flock


def _live(uid: int | None = None, pgid: int | None = None) -> list[int]:
    """Running (non-zombie) pids owned by `uid` or in process group `pgid`."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if uid is not None and os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and (pgid is None or int(fields[2]) == pgid):  # zombies run nothing
                pids.append(int(name))
        except (OSError, IndexError, ValueError):
            pass
    return pids


def reap_group(pgid: int) -> None:
    """SIGKILL a process group until none of it runs: a fork bomb keeps adding
    members while the first kill is delivered."""
    for _ in range(100):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not _live(pgid=pgid):
            return
        time.sleep(0.01)


def reap_uid(uid: int) -> None:
    """Kill whatever still runs as a run's uid (a daemonised child, say), and
    wait until it is gone so the next run with this uid starts from zero."""
    for _ in range(50):
        pids = _live(uid=uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


def nproc_limit(max_procs: int, uid: int | None) -> int:
    """RLIMIT_NPROC counts all tasks of a user. A fresh uid starts at zero;
    our own uid already has some, so the sandbox gets that many more."""
    if uid is not None or IS_ROOT:
        return max(1, max_procs)
    mine = 0
    for pid in _live(uid=os.getuid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                mine += int(f.read().rsplit(")", 1)[1].split()[17])  # num_threads
        except (OSError, ValueError, IndexError):
            pass
    return mine + max(1, max_procs)
