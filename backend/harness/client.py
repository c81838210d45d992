"""The engine's side of the harness boundary: a sandboxed worker process.

All harness code, the incumbent's and every candidate's, runs in one
sandboxed worker (`worker_main.py`), never in the engine, the TUI or a CLI
process. The engine sends code and rollout records over a pipe and gets back
plain data, which it validates here before using any of it:

- `load(code)` -> a `HarnessSpec` (constants checked by `spec.validate`);
- `apply(code, weights, views)` -> per rollout: reward components (finite
  floats), component errors and (label, evidence) pairs, capped in size.

The worker sees only the Python environment and a read-only copy of the
harness runtime (this package's `check`, `spec`, `namespace`, `helpers`,
`worker_main` and the math answer checker): nothing of the run dir, the
checkout, HOME or the engine's environment. A worker that hangs, dies or
answers garbage is killed and replaced; the call raises `WorkerFailure`.

    >>> spec = shared_worker().load(open(default_path).read())   # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import select
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .check import HarnessError, check_source
from .spec import HarnessSpec, sha, validate

if TYPE_CHECKING:
    from backend.sandbox.process import SandboxProcess

PACKAGE = Path(__file__).resolve().parent
RUNTIME_FILES = {
    "backend/errors.py": PACKAGE.parent / "errors.py",
    "backend/harness/check.py": PACKAGE / "check.py",
    "backend/harness/spec.py": PACKAGE / "spec.py",
    "backend/harness/namespace.py": PACKAGE / "namespace.py",
    "backend/harness/helpers.py": PACKAGE / "helpers.py",
    "backend/harness/worker_main.py": PACKAGE / "worker_main.py",
    "backend/envs/math_answer.py": PACKAGE.parent / "envs" / "math_answer.py",
}
"""What of the project the worker can see (read-only), by its path inside the worker."""
LABEL = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
MAX_LABELS = 32
MAX_EVIDENCE = 300
MAX_COMPONENTS = 64
LOAD_LIMIT_S = 10.0
CPU_S_PER_ROLLOUT = 0.05
"""A request's CPU budget grows with its batch: limit = base + this x rollouts."""
START_TIMEOUT_S = 60.0


class WorkerFailure(RuntimeError):
    """The worker hung, died or answered garbage: it was replaced; the message says why."""


@dataclass
class Scores:
    """What a harness said of one rollout (validated)."""

    components: dict[str, Any]
    errors: dict[str, Any]
    labels: list[Any]


def runtime_dir() -> str:
    """A private read-only copy of the harness runtime, made once per process."""
    global _RUNTIME
    if _RUNTIME is None or not os.path.isdir(_RUNTIME):
        d = tempfile.mkdtemp(prefix="evotui-harness-rt-")
        for rel, src in RUNTIME_FILES.items():
            dst = Path(d) / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.exists():
                shutil.copyfile(src, dst)
        for pkg in ("backend", "backend/harness", "backend/envs"):
            (Path(d) / pkg / "__init__.py").touch()
        for p in [*Path(d).rglob("*"), Path(d)]:  # readable by the worker's own uid, writable by none
            p.chmod(0o555 if p.is_dir() else 0o444)
        atexit.register(_remove_tree, d)
        _RUNTIME = d
    return _RUNTIME


_RUNTIME: str | None = None


def _remove_tree(d: str) -> None:
    for p in [Path(d), *Path(d).rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)


def _site_paths() -> list[str]:
    """Package directories the worker needs besides the runtime (math-verify installed with
    `pip install --target`/`--user`, which an isolated interpreter would not see)."""
    import site

    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site.ENABLE_USER_SITE:
        extra.append(site.getusersitepackages())
    root = str(PACKAGE.parents[1])
    return [str(Path(p).resolve()) for p in extra
            if Path(p).is_dir() and str(Path(p).resolve()) != root and not str(Path(p).resolve()).startswith(
                root + os.sep + "backend")]


class HarnessWorker:
    """One sandboxed worker process, restarted whenever it fails. Thread-safe."""

    def __init__(self, memory_mb: int = 3072) -> None:
        self.memory_mb = memory_mb
        self._proc: SandboxProcess | None = None
        self._lock = threading.Lock()
        self._specs: dict[str, HarnessSpec] = {}
        self.restarts = 0

    # ------------------------------------------------------------ process
    def _start(self) -> None:
        from backend.sandbox.process import spawn

        rt = runtime_dir()
        boot = ("import runpy, sys; sys.path.insert(0, %r); "
                "runpy.run_path(%r, run_name='__main__')" % (rt, rt + "/backend/harness/worker_main.py"))
        try:
            self._proc = spawn(boot, pythonpath=[rt, *_site_paths()], memory_mb=self.memory_mb)
        except Exception as e:  # no sandbox, no harness code: the run cannot score
            raise WorkerFailure(f"the harness worker cannot start: {type(e).__name__}: {e}"[:300]) from None

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    def _request(self, req: dict[str, Any], wall_s: float) -> dict[str, Any]:
        with self._lock:
            if self._proc is None or not self._proc.alive():
                if self._proc is not None:
                    self.restarts += 1
                    self._kill()
                self._start()
                wall_s += START_TIMEOUT_S
            try:
                return self._exchange(req, wall_s)
            except WorkerFailure:
                tail = self._proc.stderr_tail() if self._proc else ""
                self._kill()
                self.restarts += 1
                if tail:
                    raise WorkerFailure(f"harness worker failed ({tail.splitlines()[-1][:160]})") from None
                raise

    def _exchange(self, req: dict[str, Any], wall_s: float) -> dict[str, Any]:
        assert self._proc is not None  # _request starts the worker first
        proc = self._proc.proc
        assert proc.stdin is not None and proc.stdout is not None  # spawned with pipes
        data = json.dumps(req, default=str).encode()
        try:
            proc.stdin.write(b"%08x" % len(data) + data)
            proc.stdin.flush()
        except OSError:
            raise WorkerFailure("harness worker is gone") from None
        deadline = time.monotonic() + wall_s
        head = self._read(proc.stdout, 8, deadline)
        try:
            n = int(head, 16)
        except ValueError:
            raise WorkerFailure("harness worker answered garbage") from None
        if n > 256 * 2**20:
            raise WorkerFailure("harness worker answer too large")
        try:
            out = json.loads(self._read(proc.stdout, n, deadline))
        except ValueError:
            raise WorkerFailure("harness worker answered garbage") from None
        if not isinstance(out, dict) or not isinstance(out.get("ok"), bool):
            raise WorkerFailure("harness worker answered garbage")
        return out

    @staticmethod
    def _read(stream: Any, n: int, deadline: float) -> bytes:
        buf = bytearray()
        fd = stream.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerFailure("harness worker did not answer in time")
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise WorkerFailure("harness worker died")
            buf += chunk
        return bytes(buf)

    # ------------------------------------------------------------ requests
    def load(self, code: str) -> HarnessSpec:
        """The validated constants of `code`; raises HarnessError (the harness is bad)
        or WorkerFailure (the worker is)."""
        key = sha(code)
        if key in self._specs:
            return self._specs[key]
        check_source(code)  # the fast first filter, in the engine: parsing runs no code
        out = self._request({"op": "load", "code": code, "limit_s": LOAD_LIMIT_S}, 2 * LOAD_LIMIT_S + 10)
        if not out["ok"]:
            raise HarnessError(_line(out.get("error")))
        spec = validate(out.get("harness") or {})
        if len(self._specs) > 256:
            self._specs.clear()
        self._specs[key] = spec
        return spec

    def apply(self, code: str, weights: dict[str, float], views: list[dict[str, Any]],
              limit_s: float | None = None) -> list[Scores]:
        """Reward components, errors and labels for each view; raises HarnessError when the
        harness fails as a whole (it does not load, runs over its limit) and WorkerFailure
        when the worker does."""
        if not views:
            return []
        limit = limit_s if limit_s is not None else 5.0 + CPU_S_PER_ROLLOUT * len(views)
        out = self._request({"op": "apply", "code": code, "weights": weights, "rollouts": views,
                             "limit_s": limit}, 2 * limit + 10)
        if not out["ok"]:
            raise HarnessError(_line(out.get("error")))
        results = out.get("results")
        if not isinstance(results, list) or len(results) != len(views):
            raise WorkerFailure("harness worker answered with the wrong number of results")
        return [_scores(r, weights) for r in results]


def _line(msg: Any) -> str:
    text = str(msg or "").strip()
    return text.splitlines()[0][:300] if text else "harness failed"


def _scores(r: Any, weights: dict[str, Any]) -> Scores:
    """Validate one result: anything malformed becomes an error of that rollout, never data."""
    if not (isinstance(r, list) and len(r) == 3 and all(isinstance(x, (dict, list)) for x in r)):
        return Scores({k: 0.0 for k in weights}, {"_worker": "malformed result"}, [])
    comps_in, errors_in, labels_in = r
    comps, errors = {}, {}
    for name in weights:
        v = comps_in.get(name) if isinstance(comps_in, dict) else None
        if isinstance(v, (int, float)) and type(v) is not bool and math.isfinite(v):
            comps[name] = float(v)
        else:
            comps[name] = 0.0
            errors[name] = "no finite value"
    if isinstance(errors_in, dict):
        for k, v in list(errors_in.items())[:MAX_COMPONENTS]:
            errors[str(k)[:64]] = str(v)[:200]
    labels = []
    for item in labels_in[:MAX_LABELS] if isinstance(labels_in, list) else []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and LABEL.match(item[0]) \
                and isinstance(item[1], str):
            labels.append((item[0], item[1][:MAX_EVIDENCE]))
    return Scores(comps, errors, labels)


_SHARED: HarnessWorker | None = None
_SHARED_LOCK = threading.Lock()


def shared_worker() -> HarnessWorker:
    """This process's harness worker (started on first use, closed at exit)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = HarnessWorker()
            atexit.register(_SHARED.close)
        return _SHARED
