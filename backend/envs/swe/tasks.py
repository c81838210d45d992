"""SWE task generation: mutate the shipped repositories, keep the mutants the
tests catch, write them to backend/data/swe/tasks.json.

    python -m backend.envs.swe.tasks          # regenerate tasks.json (about 10 s)

Per repository, candidate mutations are shuffled with a fixed seed and
interleaved by kind (so off-by-ones do not crowd out the rest), then each runs
against the visible and the hidden tests in the sandbox. A mutant is kept
when at least one visible test fails (that failure is the issue text) and at
least one hidden test fails. Levels:

    1  one mutation: a one-line fix
    2  two mutations in one file, on different lines
    3  two mutations in two files: a change across files

Each two-mutation task is re-checked as a whole. Everything is deterministic,
so the same data gives the same tasks.json on every machine.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from itertools import combinations
from pathlib import Path

from . import repos
from .mutate import Mutation, apply, candidates

GENERATOR = 1
TASKS_FILE = repos.DATA_DIR / "tasks.json"
PER_LEVEL = {1: 4, 2: 2, 3: 2}
CANDIDATES_PER_REPO = 24


def _ordered_candidates(name: str, files: dict[str, str], seed: int) -> list[Mutation]:
    by_kind: dict[str, list[Mutation]] = {}
    for path in repos.source_files(files):
        for m in candidates(path, files[path]):
            by_kind.setdefault(m.kind, []).append(m)
    rng = random.Random(f"evotui-swe:{seed}:{name}")
    for kind in sorted(by_kind):
        rng.shuffle(by_kind[kind])
    queues = [by_kind[k] for k in sorted(by_kind)]
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _check(files: dict[str, str], groups: list[list[Mutation]]) -> list[repos.SuiteRun | None]:
    batch = []
    for muts in groups:
        batch.append((apply(files, muts), [repos.VISIBLE_DIR, repos.HIDDEN_DIR]))
    return repos.run_tests_many(batch, timeout_s=3.0)


def _caught(run: repos.SuiteRun) -> bool:
    if run.status != "failed":  # a timeout or a crash is not a clean, reproducible failure
        return False
    vis = [r for r in run.failures if r["test"].startswith(repos.VISIBLE_DIR + "/")]
    hid = [r for r in run.failures if r["test"].startswith(repos.HIDDEN_DIR + "/")]
    return bool(vis) and bool(hid)


def _record(name: str, level: int, muts: list[Mutation], run: repos.SuiteRun) -> dict:
    key = json.dumps([m.to_dict() for m in muts], sort_keys=True)
    hidden = [r for r in run.results if r["test"].startswith(repos.HIDDEN_DIR + "/")]
    return {
        "id": f"swe/{name}/{level}-{hashlib.sha256(key.encode()).hexdigest()[:8]}",
        "repo": name, "level": level, "mutations": [m.to_dict() for m in muts],
        "visible_failures": [{"test": r["test"], "message": r.get("message", "")}
                             for r in run.failures if r["test"].startswith(repos.VISIBLE_DIR + "/")],
        "hidden_failed": sum(r["status"] != "passed" for r in hidden), "hidden_total": len(hidden),
    }


def _spread(pairs: list[list[Mutation]]) -> list[list[Mutation]]:
    """Pairs that reuse no mutation come first, so tasks differ from each other."""
    used: set[Mutation] = set()
    first, rest = [], []
    for pair in pairs:
        if used.isdisjoint(pair):
            first.append(pair)
            used.update(pair)
        else:
            rest.append(pair)
    return first + rest


def generate_repo(name: str, seed: int = 0) -> list[dict]:
    """Validated tasks of all levels for one repository."""
    files = repos.repo_files(name)
    base = repos.run_tests_many([(files, [repos.VISIBLE_DIR, repos.HIDDEN_DIR])])[0]
    if base.status != "passed":
        raise RuntimeError(f"swe repo {name}: the unmutated tests do not pass: {base.output[-300:]}")
    singles = _ordered_candidates(name, files, seed)[:CANDIDATES_PER_REPO]
    runs = _check(files, [[m] for m in singles])
    good = [(m, r) for m, r in zip(singles, runs) if _caught(r)]
    tasks = [_record(name, 1, [m], r) for m, r in good[:PER_LEVEL[1]]]
    pairs: dict[int, list] = {2: [], 3: []}
    for (a, _), (b, _) in combinations(good, 2):
        if a.line != b.line or a.path != b.path:
            pairs[2 if a.path == b.path else 3].append([a, b])
    for level, groups in pairs.items():
        groups = _spread(groups)[:2 * PER_LEVEL[level]]
        checked = [(g, r) for g, r in zip(groups, _check(files, groups)) if _caught(r)]
        tasks += [_record(name, level, g, r) for g, r in checked[:PER_LEVEL[level]]]
    return tasks


def generate(seed: int = 0) -> dict:
    """All tasks for all shipped repositories, with the data hash they belong to."""
    tasks = [t for name in repos.repo_names() for t in generate_repo(name, seed)]
    return {"generator": GENERATOR, "seed": seed, "data_hash": repos.data_hash(), "tasks": tasks}


def load_tasks(path: Path = TASKS_FILE) -> list[dict]:
    """The shipped tasks; regenerated in memory if the repositories changed
    since tasks.json was written (slower, same result as rewriting it)."""
    try:
        data = json.loads(path.read_text())
        if data.get("data_hash") == repos.data_hash() and data.get("generator") == GENERATOR:
            return data["tasks"]
    except (OSError, ValueError):
        pass
    return generate()["tasks"]


def mutated_files(task: dict) -> dict[str, str]:
    """The task's repository with its bug(s) in, hidden tests included."""
    return apply(repos.repo_files(task["repo"]), [Mutation.from_dict(m) for m in task["mutations"]])


def fixed_files(task: dict) -> dict[str, str]:
    """The mutated repository with the reverse edits applied (the reference fix)."""
    muts = [Mutation.from_dict(m).reverse() for m in task["mutations"]]
    return apply(mutated_files(task), muts)


if __name__ == "__main__":
    data = generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    TASKS_FILE.write_text(json.dumps(data, indent=1) + "\n")
    levels = {lv: sum(t["level"] == lv for t in data["tasks"]) for lv in (1, 2, 3)}
    print(f"wrote {len(data['tasks'])} tasks to {TASKS_FILE} (by level: {levels})")
