"""Child side of the sandbox: confine this process, then exec the untrusted Python.

Run as a script (`python -I -S -B _launcher.py SPEC.json`), never imported, so
it starts fast and sees nothing of the parent's packages. It reads a JSON spec
written by `backend.sandbox` and, depending on `spec["mode"]`:

- "ns": unshare mount, network, pid, ipc and uts namespaces (plus a user
  namespace when not root), fork so the child is pid 1 of the new pid
  namespace (every process it leaves behind dies with it), build a new root
  on a tmpfs with read-only binds of the system and Python directories, the
  job's work directory at /sandbox and nothing else, chroot into it.
- "uid": no namespaces; only the uid drop below (root only).
- "plain": only resource limits.

Then: drop to the job's uid (root only), set rlimits, no_new_privs, exec.
Setup problems exit with status 121 and one line on stderr, so the parent
can tell a broken sandbox from a failing program.
"""

import ctypes
import json
import os
import resource
import signal
import sys

SETUP_FAILED = 121
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_NO_NEW_PRIVS = 38
# statvfs f_flag bits -> mount flags. A bind remount inside a user namespace
# must keep the "locked" flags of the original mount or the kernel says EPERM.
ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC,
            1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def fail(msg: str) -> None:
    sys.stderr.write(f"sandbox setup failed: {msg}\n")
    sys.stderr.flush()
    os._exit(SETUP_FAILED)


def check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        fail(f"{what}: {os.strerror(err)}")


def mount(src, dst, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {src} on {dst}")


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def make_point(dst: str, like: str) -> None:
    """Create an empty mount point matching `like` (a directory or a file)."""
    if os.path.isdir(like):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()


def bind(src: str, dst: str, readonly: bool) -> None:
    make_point(dst, src)
    mount(src, dst, None, MS_BIND | MS_REC)
    keep = 0
    for st, ms in ST_TO_MS.items():
        if os.statvfs(src).f_flag & st:
            keep |= ms
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | keep | (MS_RDONLY if readonly else 0)
    mount(None, dst, None, flags)


def build_root(spec: dict) -> None:
    """The new root: only what Python needs, read-only, plus the work dir."""
    root = spec["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks to the host
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
    # /tmp first: binds of paths under the host's /tmp then land inside it
    os.makedirs(root + "/tmp", exist_ok=True)
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmp_mb']}m,mode=1777")
    for src in spec["ro_binds"]:
        if os.path.islink(src) and os.path.dirname(src) == "/":
            os.symlink(os.readlink(src), root + src)  # merged-usr links such as /bin -> usr/bin
        elif os.path.exists(src):
            bind(src, root + src, readonly=True)
    for path in spec.get("hide", []):
        if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in spec["ro_binds"]):
            continue  # not reachable from inside anyway; masking would only reveal its name
        if os.path.isdir(path):
            make_point(root + path, path)
            mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")
        elif os.path.exists(path):
            bind("/dev/null", root + path, readonly=True)
    bind(spec["workdir"], root + spec["inner_workdir"], readonly=False)
    for point in spec.get("mount_points", []):  # where a pool worker's jobs mount their own dirs
        os.makedirs(root + point, exist_ok=True)
    for dev in ("null", "zero", "random", "urandom"):
        bind("/dev/" + dev, root + "/dev/" + dev, readonly=False)
    os.makedirs(root + "/proc", exist_ok=True)
    # A fresh /proc shows only this pid namespace; where the kernel refuses it
    # (nested containers) the sandbox simply has no /proc.
    libc.mount(b"proc", (root + "/proc").encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    check(libc.chroot(root.encode()), "chroot")
    os.chdir(spec["inner_workdir"])


_child = {"pid": 0, "term": False}


def _on_term(signum, frame):
    # The parent's timeout: kill the namespace's init while we are alive to reap
    # it, so nothing is orphaned to a host init that may never reap zombies.
    _child["term"] = True
    if _child["pid"]:
        os.kill(_child["pid"], signal.SIGKILL)


def relay(pid: int) -> None:
    """Wait for the pid-1 child and leave with its status (or its signal)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be (re)handled
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def enter_namespaces(spec: dict) -> None:
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.getuid(), os.getgid()
    if spec["userns"]:
        flags |= CLONE_NEWUSER
    check(libc.unshare(flags), "unshare")
    if spec["userns"]:
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"{uid} {uid} 1")
        write("/proc/self/gid_map", f"{gid} {gid} 1")
    signal.signal(signal.SIGTERM, _on_term)
    pid = os.fork()
    if pid:
        _child["pid"] = pid
        if _child["term"]:
            os.kill(pid, signal.SIGKILL)
        relay(pid)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    build_root(spec)


def drop_and_limit(spec: dict) -> None:
    if spec.get("uid") is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
    lim = spec["limits"]
    mb = 1024 * 1024
    for res, value in ((resource.RLIMIT_AS, lim["memory_mb"] * mb),
                       (resource.RLIMIT_FSIZE, lim["file_mb"] * mb),
                       (resource.RLIMIT_NPROC, lim["nproc"]),
                       (resource.RLIMIT_NOFILE, lim["nofile"]),
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    # soft limit sends SIGXCPU, the hard one a second later SIGKILL
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if spec["mode"] == "ns":
        enter_namespaces(spec)
    else:
        os.chdir(spec["inner_workdir"])
    try:
        drop_and_limit(spec)
    except OSError as e:
        fail(f"limits: {e}")
    try:
        os.execve(spec["python"], spec["argv"], spec["env"])
    except OSError as e:
        fail(f"exec {spec['python']}: {e}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # any setup bug must read as "sandbox broken", not as the program failing
        import traceback

        where = traceback.extract_tb(e.__traceback__)[-1]
        fail(f"{type(e).__name__}: {e} (in {where.name}, line {where.lineno})")
