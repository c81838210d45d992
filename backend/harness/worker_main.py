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

Every request runs in a child of its own (a large batch in several, one per
core), with a CPU-time limit (a signal
first, RLIMIT_CPU for C loops no handler interrupts) and a wall deadline, so
one request's state, hang or crash never reaches the next: nothing a harness
does outlives its request.

Spares: once requests in a row apply the same code (a run's training steps, the
chunks of a batch scored while it decodes), that many children as the last one
used are forked right after its answer, with that code loaded under the CPU limit,
and wait for the next request's rows. Each still serves one request and exits; the
request no longer waits for the fork and the load. A spare that died is passed
over for a child forked then, so a harness fails as it would without spares.
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


def handle(req: dict[str, Any], loaded: Any = None) -> dict[str, Any]:
    """Run one request (in the forked child); `loaded`: its harness, loaded by a spare."""
    from backend.harness import namespace as hns
    from backend.harness.check import HarnessError

    try:
        h = loaded if loaded is not None else hns.load(req["code"])
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


def _cpu_used() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _limit_cpu(limit: float, hard: bool = True) -> None:
    """This process may use `limit` more seconds of CPU: an Overtime signal at `limit`, the kernel's
    SIGXCPU a second later (a C loop no handler interrupts). `hard` False keeps the hard limit,
    so a spare can raise its soft one for the request after its load."""
    cpu = math.ceil(_cpu_used() + limit) + 1
    _, old_hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1 if hard else old_hard))
    signal.signal(signal.SIGVTALRM, _alarm)
    # re-arms every 0.1 s of CPU: a loop in a `finally:` cannot outlast the first alarm
    signal.setitimer(signal.ITIMER_VIRTUAL, limit, 0.1)


def run_child(req: dict[str, Any], wfd: int, loaded: Any = None) -> None:
    """Answer `req` on `wfd` under its CPU limit; `loaded`: its harness, loaded by a spare."""
    limit = float(req.get("limit_s", 10.0))
    _limit_cpu(limit)
    try:
        out = handle(req, loaded)
    except Overtime:
        out = {"ok": False, "error": f"harness ran over its {limit:g}s CPU limit"}
    except BaseException as e:  # noqa: BLE001 - whatever the harness raised is its failure
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    _answer(wfd, out)


def _answer(wfd: int, out: dict[str, Any]) -> None:
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


class Spare:
    """A child forked ahead of its request with `code` loaded: it reads one request's rows (a
    frame) from `req_w`'s pipe, answers on `ans_r`'s and exits. `others`: the pipes of the spares
    already waiting, which it closes."""

    def __init__(self, code: str, limit: float, others: "list[Spare]") -> None:
        req_r, self.req_w = os.pipe()
        self.ans_r, ans_w = os.pipe()
        self.code = code
        self.pid = os.fork()
        if self.pid == 0:
            try:
                for fd in [self.req_w, self.ans_r, *(fd for o in others for fd in (o.req_w, o.ans_r))]:
                    os.close(fd)
                _serve_once(code, limit, req_r, ans_w)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(ans_w)

    def give(self, part: dict[str, Any]) -> tuple[int, int] | None:
        """Hand `part` to the spare: (pid, read end of its answer pipe), or None if it is gone
        (its load ran past the kernel's CPU limit); it is then reaped."""
        try:
            with os.fdopen(self.req_w, "wb") as f:
                write_frame(f, {k: v for k, v in part.items() if k != "code"})
        except OSError:  # BrokenPipeError: the spare died
            os.close(self.ans_r)
            os.waitpid(self.pid, 0)
            return None
        return self.pid, self.ans_r

    def drop(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.close(self.req_w)
        os.close(self.ans_r)
        os.waitpid(self.pid, 0)


def _serve_once(code: str, limit: float, req_r: int, wfd: int) -> None:
    """A spare's life: load `code` under `limit` of CPU, then serve the request that comes (none:
    the worker let the spare go). A load that failed is that request's answer, as a child
    forked for the request would give it."""
    from backend.harness import namespace as hns
    from backend.harness.check import HarnessError

    _limit_cpu(limit, hard=False)
    loaded, failed = None, None
    try:
        loaded = hns.load(code)
    except Overtime:
        pass  # loaded again under the request's own limit, whose message names it
    except HarnessError as e:
        failed = {"ok": False, "error": str(e)[:300]}
    except BaseException as e:  # noqa: BLE001 - whatever the harness raised is its failure
        failed = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    with os.fdopen(req_r, "rb") as f:
        req = read_frame(f)
    if req is None:
        return
    if failed is not None:
        _answer(wfd, failed)
    else:
        run_child(dict(req, code=code), wfd, loaded)


class Spares:
    """The worker's spare children (module docstring), for the code of the last requests."""

    def __init__(self) -> None:
        self.ready: list[Spare] = []
        self.last: str | None = None  # the code of the last apply request

    def take(self, code: str) -> Spare | None:
        for i, spare in enumerate(self.ready):
            if spare.code == code:
                return self.ready.pop(i)
        return None

    def after(self, req: dict[str, Any], used: int) -> None:
        """After answering `req` with `used` children: spares for its code if the request before
        it applied the same code, none of any other."""
        if req.get("op") != "apply":
            return
        code, repeated = req["code"], req["code"] == self.last
        self.last = code
        for spare in [s for s in self.ready if s.code != code or not repeated]:
            self.ready.remove(spare)
            spare.drop()
        if repeated:
            limit = float(req.get("limit_s", 10.0))
            for _ in range(used - len(self.ready)):
                self.ready.append(Spare(code, limit, self.ready))

    def drop_all(self) -> None:
        while self.ready:
            self.ready.pop().drop()


SPARES = Spares()


EXITING: list[int] = []
"""Children that answered: reaped (`reap_exited`) after the worker has written the answer."""


def reap_exited() -> None:
    while EXITING:
        os.waitpid(EXITING.pop(), 0)


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
    if not killed:
        try:
            out: dict[str, Any] = json.loads(b"".join(chunks))
        except ValueError:
            pass
        else:  # it answered and is exiting: reaped once the answer is out, off the request's time
            EXITING.append(pid)
            return out
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        out = json.loads(b"".join(chunks))
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


def in_children(req: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The answer to `req`, and how many children gave it."""
    limit = float(req.get("limit_s", 10.0))
    deadline = time.monotonic() + 2 * limit + 5
    parts = split(req)
    running = [_start(part) for part in parts]
    answers = [collect(pid, rfd, limit, deadline) for pid, rfd in running]
    failed = [a for a in answers if not a.get("ok")]
    if failed or len(answers) == 1:
        return (failed[0] if failed else answers[0]), len(parts)
    return {"ok": True, "results": [r for a in answers for r in a.get("results") or []]}, len(parts)


def _start(part: dict[str, Any]) -> tuple[int, int]:
    """A spare loaded with the part's code takes it, or a child forked for it now."""
    spare = SPARES.take(part["code"]) if part.get("op") == "apply" else None
    started = spare.give(part) if spare is not None else None
    return started if started is not None else fork_child(part)


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
            SPARES.drop_all()
            return
        if req is None:
            SPARES.drop_all()
            return
        if req.get("op") == "ping":
            write_frame(stdout, {"ok": True})
            continue
        if req.get("op") == "apply" and not warm:
            preload()
            warm = True
        answer, used = in_children(req)
        write_frame(stdout, answer)
        reap_exited()
        SPARES.after(req, used)


if __name__ == "__main__":
    main()
