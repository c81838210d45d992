"""Which isolation this machine allows, chosen once by trying it, and the
per-run uids that make process limits and clean-up exact when we are root.

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

import json
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
_CANDIDATES = {
    "ns": Mode("ns", True, not IS_ROOT, IS_ROOT),
    "uid": Mode("uid", False, False, True),
    "plain": Mode("plain", False, False, False),
}
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
        from . import run_python

        forced = os.environ.get("EVOTUI_SANDBOX_MODE", "")
        order = [forced] if forced in _CANDIDATES else (["ns", "uid", "plain"] if IS_ROOT else ["ns", "plain"])
        for name in order:
            _trying = _CANDIDATES[name]
            try:
                r = run_python("print('ok')", timeout_s=20)
            finally:
                _trying = None
            if r.status == "passed" and r.stdout.strip() == "ok":
                _chosen = _CANDIDATES[name]
                break
            _failures[name] = (r.detail.get("sandbox_error") or r.stderr.strip()[-300:] or r.status)
        else:
            _chosen = _CANDIDATES["plain"]
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

    from . import run_python

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
