"""SweEnv: repository-level bug fixing over many turns, judged by hidden tests.

Tasks come from backend/data/swe/tasks.json (see tasks.py): a shipped repository with
one or two injected bugs; the question is an issue describing the failing
visible test(s), the file list and the tool reference (the tool format is the
env's API, so the env states it, not the evolvable prompt). The agent works
in an in-memory copy of the repository without the hidden tests. The
evaluator copies the agent's package files (never its visible tests) next to
the hidden tests and runs them in the sandbox: all pass = solved.

`evaluate(task, completion)` and `observe(...)` replay the tool calls found in
a transcript (as written by run_episodes) on a fresh copy, so a stored rollout
can be re-judged; within run_episodes the live workspace is judged directly.
"""

from __future__ import annotations

import hashlib
import random
import re

from ..base import Episode, Task, Verdict
from . import repos
from .episode import Run, drive
from .tasks import load_tasks, mutated_files
from .tools import TOOLS_DOC, Workspace, parse_call

_RESULT = re.compile(r"<tool_result name=[^>]*>.*?</tool_result>", re.S)


def in_heldout(task_id: str, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def issue_text(rec: dict, visible: dict[str, str]) -> str:
    readme = visible.get("README.md", "").splitlines()
    about = next((ln.strip() for ln in readme if ln.strip() and not ln.startswith("#")), "")
    lines = [f"Repository `{rec['repo']}`: {about}", "", "Bug report: the test suite fails."]
    for f in rec["visible_failures"][:2]:
        lines.append(f"FAILED {f['test']}: {f['message']}")
    lines += ["", "Find and fix the bug in the package code (not in the tests); hidden tests will check "
              "your fix. Run the tests, then submit.", "", "Files: " + ", ".join(sorted(visible)), "", TOOLS_DOC]
    return "\n".join(lines)


class SweEnv:
    domain = "swe"
    multi_turn = True

    def __init__(self, cfg):
        self.cfg = cfg
        recs = sorted(load_tasks(), key=lambda t: t["id"])
        if cfg.n_tasks > 0:
            recs = recs[: cfg.n_tasks]
        self._recs = {r["id"]: r for r in recs}
        self._tasks = {r["id"]: self._task(r) for r in recs}
        heldout = {k for k in self._tasks if in_heldout(k, cfg.heldout_fraction)}
        self._train = [t for k, t in self._tasks.items() if k not in heldout]
        self._heldout = [t for k, t in self._tasks.items() if k in heldout]

    def _task(self, rec: dict) -> Task:
        visible, _ = repos.split(mutated_files(rec))
        files = sorted({m["path"] for m in rec["mutations"]})
        meta = {"repo": rec["repo"], "level": rec["level"], "n_bugs": len(rec["mutations"]),
                "n_files": len(files), "hidden_total": rec["hidden_total"]}
        return Task(rec["id"], "swe", issue_text(rec, visible), None, meta)

    # ------------------------------------------------------------ tasks
    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        """Training tasks of CURRICULUM["level"] (1 one-line fix, 2 two bugs in a
        file, 3 bugs in two files; 0 = any), nearest level when none exist."""
        level = int(curriculum.get("level", 0) or 0)
        pool = self._train
        if level > 0 and pool:
            nearest = min({t.meta["level"] for t in pool}, key=lambda lv: (abs(lv - level), lv))
            pool = [t for t in pool if t.meta["level"] == nearest]
        if not pool:
            return []
        return rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]

    def heldout_tasks(self) -> list[Task]:
        return list(self._heldout)

    def task(self, task_id: str) -> Task:
        return self._tasks[task_id]

    def workspace(self, task: Task) -> Workspace:
        visible, _ = repos.split(mutated_files(self._recs[task.id]))
        return Workspace(visible, self.cfg.max_tool_chars)

    # ------------------------------------------------------------ episodes
    def run_episodes(self, tasks: list[Task], generate, chat_ids, harness,
                     sampling: dict | None = None) -> list[Episode]:
        """One episode per task (repeat a task for a group), all advanced turn by
        turn in one batch; every episode comes back judged by the hidden tests.
        `sampling` overrides harness.sampling keys (e.g. temperature 0 for eval)."""
        runs = []
        for task in tasks:
            runs.append(Run(task, self.workspace(task), harness.messages(task), chat_ids, self.cfg))
        samp = {**harness.sampling, **(sampling or {})}
        drive(runs, generate, samp, self.cfg, self.cfg.test_timeout_s, self.cfg.memory_mb)
        episodes = [r.episode() for r in runs]
        verdicts = self._judge([(r.task, r.ws.files) for r in runs])
        for ep, v in zip(episodes, verdicts):
            ep.verdict = v
            ep.obs["tests"] = self._tests_obs(v)
        return episodes

    def _judge(self, pairs: list[tuple[Task, dict[str, str]]]) -> list[Verdict]:
        batch = []
        for task, files in pairs:
            _, hidden = repos.split(repos.repo_files(self._recs[task.id]["repo"]))
            batch.append((repos.hidden_eval_files(files, hidden), [repos.HIDDEN_DIR]))
        out = []
        for run in repos.run_tests_many(batch, self.cfg.test_timeout_s, self.cfg.memory_mb):
            s = run.summary()
            ok = run.status == "passed"
            s["fraction_passed"] = round(run.passed / s["total"], 3) if s["total"] else 0.0
            out.append(Verdict(ok, 1.0 if ok else 0.0, run.status, s))
        return out

    @staticmethod
    def _tests_obs(v: Verdict) -> dict:
        d = v.detail
        return {"status": v.status, "passed": d.get("passed", 0), "failed": d.get("failed", 0),
                "errors": d.get("errors", 0), "total": d.get("total", 0), "failures": d.get("failures", [])}

    # ------------------------------------------------------------ transcripts
    def replay(self, task: Task, completion: str) -> Workspace:
        """Re-run the first tool call of each assistant message in a transcript
        on a fresh workspace (tests are counted, not run)."""
        ws = self.workspace(task)
        for turn, segment in enumerate(_RESULT.split(completion or "")):
            if not segment.strip():
                continue
            name, args, err = parse_call(segment)
            ws.note_call(turn, name, args, err, segment)
            if err:
                continue
            if name == "submit":
                ws.ev["submitted"] = True
                break
            if name == "edit":
                ws.edit(args, turn)
            elif name == "run_tests":
                ws.note_tests(turn, None)
            else:
                getattr(ws, name)(args)
        return ws

    def evaluate(self, task: Task, completion: str) -> Verdict:
        """Judge a transcript: replay its edits, run the hidden tests. Never raises."""
        try:
            return self._judge([(task, self.replay(task, completion).files)])[0]
        except Exception as e:
            return Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"[:300]})

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        """Evidence from a transcript (run_episodes already fills Episode.obs)."""
        try:
            ev = dict(self.replay(task, completion).ev)
        except Exception as e:
            ev = {"observe_error": f"{type(e).__name__}: {e}"[:300]}
        ev["tests"] = self._tests_obs(verdict)
        return ev
