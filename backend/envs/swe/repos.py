"""The shipped repositories under backend/data/swe/, and running their
tests in the sandbox.

A repository is a folder `<name>/` with README.md, a package, `tests/`
(visible to the agent) and `hidden_tests/` (only the evaluator sees them).
Everything here works on in-memory file maps {relative path: text}: the
agent's workspace is such a map, and every test run copies it into a fresh
sandbox directory.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from backend.sandbox.pool import shared

# Package data, not code (see backend/data/README.md).
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "swe"
HIDDEN_DIR = "hidden_tests"
VISIBLE_DIR = "tests"
RUNNER = (Path(__file__).with_name("_testrunner.py")).read_text()
MARK = "@@evotui-tests@@"


def repo_names() -> list[str]:
    return sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir() and (p / HIDDEN_DIR).is_dir())


@lru_cache(maxsize=None)
def _load(name: str) -> tuple[tuple[str, str], ...]:
    root = DATA_DIR / name
    files = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and "__pycache__" not in rel and not rel.endswith(".pyc"):
            files.append((rel, p.read_text()))
    return tuple(files)


def repo_files(name: str) -> dict[str, str]:
    """All files of a shipped repository, hidden tests included."""
    return dict(_load(name))


def split(files: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(what the agent sees, the hidden tests)."""
    hidden = {k: v for k, v in files.items() if k.startswith(HIDDEN_DIR + "/")}
    return {k: v for k, v in files.items() if k not in hidden}, hidden


def source_files(files: dict[str, str]) -> list[str]:
    """Package modules that mutations may touch (not tests, not __init__)."""
    return sorted(k for k in files if k.endswith(".py") and not k.startswith((VISIBLE_DIR + "/", HIDDEN_DIR + "/"))
                  and not k.endswith("__init__.py"))


def data_hash() -> str:
    """Content hash of all shipped repositories (tasks.json records it)."""
    h = hashlib.sha256()
    for name in repo_names():
        for rel, text in _load(name):
            h.update(f"{name}/{rel}\0{text}\0".encode())
    return h.hexdigest()[:16]


@dataclass
class SuiteRun:
    status: str
    """passed (all tests pass), failed, error (no result: import crash, exit),
    timeout, memory, crashed."""
    passed: int = 0
    failed: int = 0
    errors: int = 0
    results: list[dict] = field(default_factory=list)
    output: str = ""

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if r["status"] != "passed"]

    def summary(self) -> dict:
        return {"status": self.status, "passed": self.passed, "failed": self.failed, "errors": self.errors,
                "total": self.passed + self.failed + self.errors,
                "failures": [f"{r['test']}: {r.get('message', '')}"[:300] for r in self.failures[:5]]}


def make_test_job(files: dict[str, str], targets: list[str], timeout_s: float, memory_mb: int) -> tuple[dict, str]:
    nonce = secrets.token_hex(16)
    job = dict(code=RUNNER, files=files, argv=targets, stdin=nonce + "\n", timeout_s=timeout_s,
               memory_mb=memory_mb, hide=[str(DATA_DIR)], main="_run_tests.py", max_output=12000)
    return job, nonce


def parse_run(res, nonce: str) -> SuiteRun:
    marker = MARK + nonce
    lines = res.stdout.splitlines()
    found = [ln for ln in lines if ln.startswith(marker)]
    output = "\n".join(ln for ln in lines if not ln.startswith(MARK)).strip()
    if not found:
        status = res.status if res.status in ("timeout", "memory", "crashed") else "error"
        tail = (res.stderr or "").strip()[-600:]
        return SuiteRun(status, output=(output + "\n" + tail).strip() or f"test run ended: {status}")
    try:
        data = json.loads(found[-1][len(marker):])
    except ValueError:
        return SuiteRun("error", output=output)
    ok = data["failed"] == 0 and data["error"] == 0 and data["passed"] > 0 and res.returncode == 0
    return SuiteRun("passed" if ok else "failed", data["passed"], data["failed"], data["error"],
                   data["results"], output)


def run_tests_many(batch: list[tuple[dict[str, str], list[str]]], timeout_s: float = 10.0,
                   memory_mb: int = 512) -> list[SuiteRun]:
    """Run each (files, test paths) pair in its own sandbox, in parallel (on warm workers)."""
    jobs, nonces = [], []
    for files, targets in batch:
        job, nonce = make_test_job(files, targets, timeout_s, memory_mb)
        jobs.append(job)
        nonces.append(nonce)
    return [parse_run(res, n) for res, n in zip(shared([str(DATA_DIR)]).run_many(jobs), nonces)]


def hidden_eval_files(workspace: dict[str, str], hidden: dict[str, str]) -> dict[str, str]:
    """A fresh copy for the evaluator: the agent's package files, none of its
    (possibly edited) visible tests, and the hidden tests."""
    keep = {k: v for k, v in workspace.items() if not k.startswith((VISIBLE_DIR + "/", HIDDEN_DIR + "/"))}
    return {**keep, **hidden}
