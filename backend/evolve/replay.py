"""Replay: recompute rewards and labels of stored rollouts under other harnesses.

Candidate harness code is untrusted (an LLM may have written it), so it never
runs in the engine process. One subprocess replays the incumbent and every
candidate of a round over the same rows. Each harness runs in a child forked
from it with a CPU-time limit (SIGVTALRM, which math-verify's own SIGALRM
timeouts leave alone, backed by RLIMIT_CPU for C loops no signal handler
interrupts), and the whole process has a wall-clock and memory limit. When
that batch dies anyway, each harness is replayed alone, so one bad candidate
fails only itself.

The subprocess goes through `backend.sandbox.run_python` when it exists and
falls back to a plain `subprocess.run` with the same limits.
"""

from __future__ import annotations

import json
import math
import os
import site
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])


def import_paths() -> list[str]:
    """Where the replay child imports from: the project, plus what an isolated (`-I`)
    interpreter would not see but this process does (PYTHONPATH, user site-packages),
    so math-verify installed with `pip install --target` or `--user` is found there too."""
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site.ENABLE_USER_SITE:
        extra.append(site.getusersitepackages())
    paths = [ROOT]
    for p in extra:
        p = str(Path(p).resolve())
        if Path(p).is_dir() and p not in paths:
            paths.append(p)
    return paths


MARKER = "@@REPLAY@@"
MEMORY_MB = 1536
HISTORY_GROUPS = 16
"""Groups from before the window replayed too, so a fix is not judged on recent rollouts alone."""
MAX_ROWS = 600
MAX_OUTPUT = 50_000_000
"""Characters of replay output read back (the sandbox cuts longer output, which would break the JSON)."""
ROW_FIELDS = ("id", "step", "group_idx", "idx", "prompt", "completion", "finish", "completion_tokens",
              "task_json", "obs_json", "domain", "task_id", "correct", "reward", "verdict", "labels")

DRIVER = r"""
import json, math, os, resource, select, signal, sys, time
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # numeric libraries must not spawn a thread per core under the process limit
inp = json.load(open("replay_in.json"))
mem = inp["memory_mb"] * 2**20
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
sys.path[:0] = inp["path"]
import types
# Replay never builds tasks: stand in for the task generators (and the plotting stack they
# import) so backend.envs.math loads in a fraction of a second. Harness code cannot import it.
sys.modules.setdefault("reasoning_gym", types.ModuleType("reasoning_gym"))
from backend.harness.loader import Harness, RolloutView
import backend.envs.math
if inp["rows"]:
    import math_verify  # noqa: F401 - once here, not in every child

class Overtime(BaseException):
    "BaseException: harness code that catches Exception cannot swallow it."

def _alarm(signum, frame):
    raise Overtime()

def replay_one(code):
    res = {"rows": [], "error": None}
    signal.signal(signal.SIGVTALRM, _alarm)
    # re-arms every 0.1 s of CPU: a loop in a `finally:` cannot outlast the first alarm
    signal.setitimer(signal.ITIMER_VIRTUAL, inp["limit_s"], 0.1)
    try:
        h = Harness.from_code(code)
        res.update(validity=sorted(h.validity), filters=h.filters, advantage=h.advantage, weights=h.weights)
        for row in inp["rows"]:
            v = RolloutView.from_row(row)
            reward, comps = h.score(v)
            labels = sorted({label for label, _ in h.diagnose(v)})
            res["rows"].append([reward, labels, bool(comps.get("_errors"))])
    except Overtime:
        res = {"rows": [], "error": OVERTIME}
    except BaseException as e:
        res = {"rows": [], "error": ("%s: %s" % (type(e).__name__, e))[:300]}
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    return json.dumps(res, default=str).encode()

def in_child(code):
    # A forked child per harness: C code that never returns to the interpreter
    # (sum(iter(int, 1))) outlasts the alarm, so RLIMIT_CPU and a deadline stop it,
    # and whatever it does costs only this harness.
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        cpu = math.ceil(inp["limit_s"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        try:
            out = replay_one(code)
        except BaseException as e:
            out = json.dumps({"rows": [], "error": ("%s: %s" % (type(e).__name__, e))[:300]}).encode()
        with os.fdopen(wfd, "wb") as f:
            f.write(out)
        os._exit(0)
    os.close(wfd)
    chunks, deadline = [], time.monotonic() + 2 * inp["limit_s"] + 10
    with os.fdopen(rfd, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(f.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        if status in (-signal.SIGXCPU, -signal.SIGKILL):
            return {"rows": [], "error": OVERTIME}
        return {"rows": [], "error": "replay of this harness died (exit status %s)" % status}

OVERTIME = "replay ran over %ss of CPU time" % inp["limit_s"]
results = [in_child(code) for code in inp["codes"]]
sys.stdout.write("\n" + MARKER + json.dumps(results, default=str) + "\n")
""".replace("MARKER", repr(MARKER))


def select_rows(store, step: int, window: int, extra_ids=(), history_groups: int = HISTORY_GROUPS) -> list[dict]:
    """Rows to replay: the recent window, whole groups spread over older history,
    and `extra_ids` (rollouts earlier promotions fixed), without duplicates."""
    cols = ", ".join(ROW_FIELDS)
    recent = store.rows(f"SELECT {cols} FROM rollouts WHERE step > ? AND step <= ? "
                        f"AND coalesce(status, 'ok') != 'error' ORDER BY id DESC LIMIT ?",
                        (step - window, step, MAX_ROWS))
    older = store.rows("SELECT DISTINCT step, group_idx FROM rollouts WHERE step <= ? ORDER BY step, group_idx",
                       (step - window,))
    if older and history_groups:
        stride = max(1, len(older) // history_groups)
        picked = older[::stride][:history_groups]  # evenly spread, deterministic
        for g in picked:
            recent += store.rows(f"SELECT {cols} FROM rollouts WHERE step = ? AND group_idx = ?",
                                 (g["step"], g["group_idx"]))
    ids = list(extra_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        recent += store.rows(f"SELECT {cols} FROM rollouts WHERE id IN ({','.join('?' * len(chunk))})", chunk)
    seen, out = set(), []
    for r in sorted(recent, key=lambda r: r["id"]):
        if r["id"] not in seen:
            seen.add(r["id"])
            out.append(r)
    return out


def _payload_rows(rows: list[dict]) -> list[dict]:
    keep = ("prompt", "completion", "finish", "completion_tokens", "task_json", "obs_json", "domain", "task_id")
    return [{k: r.get(k) for k in keep} for r in rows]


def _run(codes: list[str], rows: list[dict], limit_s: float, wall_s: float) -> tuple[list | None, str]:
    """Run the driver once; returns (results, "") or (None, why it failed)."""
    payload = json.dumps({"codes": codes, "rows": rows, "limit_s": limit_s, "path": import_paths(),
                          "memory_mb": MEMORY_MB})
    stdout, why = _execute(DRIVER, {"replay_in.json": payload}, wall_s)
    if MARKER not in (stdout or ""):
        return None, why or "replay produced no result"
    try:
        results = json.loads(stdout.rsplit(MARKER, 1)[1])
    except ValueError:
        return None, "replay output was not JSON"
    return results, ""


def _execute(code: str, files: dict, wall_s: float) -> tuple[str, str]:
    """(stdout, failure reason) of running `code` with `files` in a fresh folder."""
    try:
        from backend.sandbox import run_python
    except ImportError:
        run_python = None
    for _attempt in range(2 if run_python is not None else 0):
        try:
            res = run_python(code, files=files, timeout_s=wall_s, memory_mb=MEMORY_MB * 2, pythonpath=import_paths(),
                             max_output=MAX_OUTPUT)
        except TypeError:
            break  # a sandbox with another signature: use the plain fallback
        if (res.detail or {}).get("sandbox_error"):
            break  # the sandbox could not start; the harness loader's own checks still hold below
        if res.status == "crashed" and (res.detail or {}).get("signal") == "SIGKILL" and not _attempt:
            continue  # killed from outside (not by a limit, which reads as timeout/memory): once more
        tail = (res.stderr or "").strip().splitlines()[-1:] or [str(res.detail or "")]
        return res.stdout or "", f"replay {res.status} (exit {res.returncode}): {tail[0][:200]}"
    with tempfile.TemporaryDirectory(prefix="evotui-replay-") as d:
        for name, text in files.items():
            (Path(d) / name).write_text(text)
        try:
            p = subprocess.run([sys.executable, "-I", "-c", code], cwd=d, capture_output=True, text=True,
                               timeout=wall_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "", f"replay timed out after {wall_s:.0f}s"
    tail = p.stderr.strip().splitlines()[-1:] or [""]
    return p.stdout, f"replay exited with {p.returncode}: {tail[0][:200]}"


def replay(codes: list[str], rows: list[dict], timeout_s: float) -> list[dict]:
    """Replay each harness over `rows`. One result per code, in order:
    {"rows": [[reward, labels, had_errors], ...], "error": str | None, "validity", "filters",
    "advantage", "weights"}. Never raises."""
    if not codes:
        return []
    prow = _payload_rows(rows)
    # Startup (imports) takes a second or two; give the batch its harnesses' limits plus that
    # (a harness stopped by RLIMIT_CPU rather than the alarm runs up to a second or two longer).
    per = math.ceil(timeout_s) + 2
    results, why = _run(codes, prow, timeout_s, per * len(codes) + 20)
    if results is not None and len(results) == len(codes):
        return results
    if len(codes) == 1:  # alone already: running it again would fail the same way
        return [{"rows": [], "error": why}]
    out = []
    for code in codes:  # the batch died: isolate each harness
        res, why_one = _run([code], prow, timeout_s, per + 20)
        out.append(res[0] if res else {"rows": [], "error": why_one or why})
    return out
