"""The harness worker: the only process where harness code runs.

Started by `backend.harness.client` inside the sandbox with a copy of just the
harness runtime (this file, `check`, `spec`, `namespace`, `helpers` and the math
answer checker) on a read-only path. It reads requests from stdin and writes
answers to stdout, each a frame: 8 ASCII hex digits of length, then JSON.

Requests:
    {"op": "load", "code": str, "limit_s": float}
        -> {"ok": true, "harness": {"constants": {...}, "rewards": [...], "diagnostics": [...]}}
    {"op": "apply", "code": str, "weights": {name: w}, "rollouts": [view dict, ...], "limit_s": float}
        -> {"ok": true, "results": [[components, errors, [[label, evidence], ...]], ...]}
    any failure -> {"ok": false, "error": "one line"}

Every request runs in a child forked for it (a large batch in several, one per
core), with a CPU-time limit (a signal
first, RLIMIT_CPU for C loops no handler interrupts) and a wall deadline, so
one request's state, hang or crash never reaches the next: nothing a harness
does outlives its request.
"""

import json
import math
import os
import resource
import select
import signal
import sys
import time
from typing import Any

MAX_FRAME = 256 * 2**20
PER_CHILD = 64
"""Rollouts a child scores at least before a batch is split over more children."""


class Overtime(BaseException):
    """BaseException: harness code that catches Exception cannot swallow it."""


def read_frame(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    n = int(head, 16)
    if n > MAX_FRAME:
        raise ValueError("request too large")
    return json.loads(stream.read(n))


def write_frame(stream: Any, obj: Any) -> None:
    data = json.dumps(obj, default=str, allow_nan=False).encode()
    stream.write(b"%08x" % len(data) + data)
    stream.flush()


def _alarm(signum: Any, frame: Any) -> None:
    raise Overtime()


def handle(req: dict[str, Any]) -> dict[str, Any]:
    """Run one request (in the forked child)."""
    from backend.harness import namespace as hns
    from backend.harness.check import HarnessError

    try:
        h = hns.load(req["code"])
        if req["op"] == "load":
            return {"ok": True, "harness": h.describe()}
        names = [k for k in req["weights"] if k in h.rewards]
        results = []
        for row in req["rollouts"]:
            view = hns.RolloutView(**{k: row.get(k) for k in hns.VIEW_FIELDS})
            comps, errors = hns.score(h, names, view)
            results.append([comps, errors, hns.diagnose(h, view)])
        return {"ok": True, "results": results}
    except HarnessError as e:
        return {"ok": False, "error": str(e)[:300]}


def run_child(req: dict[str, Any], wfd: int) -> None:
    limit = float(req.get("limit_s", 10.0))
    cpu = math.ceil(limit) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    signal.signal(signal.SIGVTALRM, _alarm)
    # re-arms every 0.1 s of CPU: a loop in a `finally:` cannot outlast the first alarm
    signal.setitimer(signal.ITIMER_VIRTUAL, limit, 0.1)
    try:
        out = handle(req)
    except Overtime:
        out = {"ok": False, "error": f"harness ran over its {limit:g}s CPU limit"}
    except BaseException as e:  # noqa: BLE001 - whatever the harness raised is its failure
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    try:
        data = json.dumps(out, default=str, allow_nan=False).encode()
    except (ValueError, TypeError) as e:
        data = json.dumps({"ok": False, "error": f"harness output is not plain data: {e}"[:300]}).encode()
    with os.fdopen(wfd, "wb") as f:
        f.write(data)


def fork_child(req: dict[str, Any]) -> tuple[int, int]:
    """Start a child running `req`; returns (pid, read end of its answer pipe)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            run_child(req, wfd)
        finally:
            os._exit(0)
    os.close(wfd)
    return pid, rfd


def collect(pid: int, rfd: int, limit: float, deadline: float) -> dict[str, Any]:
    """The child's answer, or why there is none (killed at the deadline, too large, died)."""
    chunks, size, killed = [], 0, False
    with os.fdopen(rfd, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            chunk = os.read(f.fileno(), 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_FRAME:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"ok": False, "error": "harness output too large"}
            chunks.append(chunk)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        out: dict[str, Any] = json.loads(b"".join(chunks))
        return out
    except ValueError:
        if killed or status in (-signal.SIGXCPU, -signal.SIGKILL):
            return {"ok": False, "error": f"harness ran over its {limit:g}s limit"}
        return {"ok": False, "error": f"harness worker child died (exit status {status})"}


def split(req: dict[str, Any]) -> list[dict[str, Any]]:
    """A large batch is scored by several children at once (one per core, up to 8);
    each child runs the harness afresh on its share, so the answers do not depend on the split."""
    rows = req.get("rollouts") or []
    k = min(8, os.cpu_count() or 1, -(-len(rows) // PER_CHILD)) if req.get("op") == "apply" else 1
    if k <= 1:
        return [req]
    size = -(-len(rows) // k)
    return [dict(req, rollouts=rows[i:i + size]) for i in range(0, len(rows), size)]


def in_children(req: dict[str, Any]) -> dict[str, Any]:
    limit = float(req.get("limit_s", 10.0))
    deadline = time.monotonic() + 2 * limit + 5
    parts = split(req)
    running = [fork_child(part) for part in parts]
    answers = [collect(pid, rfd, limit, deadline) for pid, rfd in running]
    failed = [a for a in answers if not a.get("ok")]
    if failed or len(answers) == 1:
        return failed[0] if failed else answers[0]
    return {"ok": True, "results": [r for a in answers for r in a.get("results") or []]}


def preload() -> None:
    """Import the slow libraries once, before any fork, so each request starts warm; the harness
    runtime too (`namespace` and what it imports: about 8 ms a request otherwise). No harness code
    runs here: each request's child loads its harness afresh."""
    for name in ("math_verify", "sympy", "backend.envs.math_answer", "reasoning_gym", "backend.harness.namespace"):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - an optional library; the harness that needs it fails alone
            pass


def main() -> None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the frame stream
    warm = False
    while True:
        try:
            req = read_frame(stdin)
        except ValueError as e:
            write_frame(stdout, {"ok": False, "error": f"bad request: {e}"})
            return
        if req is None:
            return
        if req.get("op") == "ping":
            write_frame(stdout, {"ok": True})
            continue
        if req.get("op") == "apply" and not warm:
            preload()
            warm = True
        write_frame(stdout, in_children(req))


if __name__ == "__main__":
    main()
