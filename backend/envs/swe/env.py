"""SweEnv: repository-level bug fixing, judged by hidden tests, in levels.

Levels 0 and 1 (levels.py, oneshot.py) are one-shot: the prompt shows the
failing test output and the code, the answer is one search/replace edit.
Levels 2-4 are the multi-turn tool episodes of backend/data/swe/tasks.json
(tasks.py: one bug, two bugs in a file, bugs in two files): the question is
an issue describing the failing visible test(s), the file list and the tool
reference (the tool format is the env's API, so the env states it, not the
evolvable prompt). The agent works in an in-memory copy of the repository
without the hidden tests. The evaluator copies the agent's package files
(never its visible tests) next to the hidden tests and runs them in the
sandbox: all pass = solved.

`evaluate(task, completion)` and `observe(...)` replay a transcript (as
written by run_episodes) on a fresh copy, so a stored rollout can be
re-judged; within run_episodes the live workspace is judged directly.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re

from ...errors import EvoError
from ..base import Episode, Task, Verdict
from . import repos
from . import levels, oneshot
from ..split import in_validation
from .episode import Run, _suffix, drive
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


def _ints(text: str) -> list[int]:
    return [int(x) for x in str(text).replace(" ", "").split(",") if x != ""]


def parse_mix(text: str) -> dict[int, float]:
    """"0:4,1:3" -> {0: 4.0, 1: 3.0}."""
    out = {}
    for part in str(text).replace(" ", "").split(","):
        if part:
            lv, _, w = part.partition(":")
            out[int(lv)] = float(w or 1)
    return out


def _repo_key(repo: str, files: dict[str, str]) -> str:
    """One key for one repository's exact files."""
    h = hashlib.sha256(repo.encode())
    for path in sorted(files):
        h.update(b"\0" + path.encode() + b"\0" + files[path].encode())
    return h.hexdigest()


def _copy(v: Verdict) -> Verdict:
    """A verdict of its own (its detail is written to per rollout)."""
    return Verdict(v.correct, v.score, v.status, copy.deepcopy(v.detail))


def _hashed(tasks: list[Task]) -> list[Task]:
    """A fixed pseudo-random order, so a prefix is a fair sample."""
    return sorted(tasks, key=lambda t: hashlib.sha256(t.id.encode()).hexdigest())


class SweEnv:
    domain = "swe"
    multi_turn = True

    def __init__(self, cfg):
        self.cfg = cfg
        self.levels = set(_ints(getattr(cfg, "levels", "2,3,4")))
        recs = sorted(load_tasks(), key=lambda t: t["id"])
        recs = [dict(r, level=r["level"] + 1) for r in recs if r["level"] + 1 in self.levels]
        if cfg.n_tasks > 0:
            recs = recs[: cfg.n_tasks]
        self._recs = {r["id"]: r for r in recs}
        self._tasks = {r["id"]: self._task(r) for r in recs}
        self._split = {k: ("heldout" if in_heldout(k, cfg.heldout_fraction) else "train") for k in self._tasks}
        self._shots: dict[str, levels.Shot] = {}
        if self.levels & set(levels.ONE_SHOT_LEVELS):
            self._add_shots()
        self._train = [t for k, t in self._tasks.items() if self._split[k] == "train"]
        self._heldout = [t for k, t in self._tasks.items() if self._split[k] != "train"]

    def _add_shots(self) -> None:
        frac = getattr(self.cfg, "level_heldout_fraction", 0.5)
        for rec in levels.load_mutants():
            key = levels.mutant_key(rec)
            side = ("validation" if in_validation(key) else "test") if in_heldout(key, frac) else "train"
            shots = [levels.build(rec, lv, s) for lv in sorted(self.levels & set(levels.ONE_SHOT_LEVELS))
                     for s in range(max(1, int(getattr(self.cfg, "seeds_per_mutant", 3))))]
            if side == "train" and 0 in self.levels and getattr(self.cfg, "leak_canaries", True) \
                    and levels.is_canary_mutant(key):
                shots.append(levels.build(rec, 0, 0, canary=True))
            for shot in shots:
                self._shots[shot.id] = shot
                self._tasks[shot.id] = self._shot_task(shot)
                self._split[shot.id] = side

    def _shot_task(self, shot: levels.Shot) -> Task:
        readme = repos.repo_files(shot.repo).get("README.md", "").splitlines()
        about = next((ln.strip() for ln in readme if ln.strip() and not ln.startswith("#")), "")
        meta = {"repo": shot.repo, "level": shot.level, "family": shot.mutation.kind,
                "variant": levels.variant(shot), "n_bugs": 1,
                "n_files": 1, "files_shown": len([p for p in shot.shown if p.endswith(".py")])}
        return Task(shot.id, "swe", oneshot.question(shot, about), None, meta)

    def _task(self, rec: dict) -> Task:
        visible, _ = repos.split(mutated_files(rec))
        files = sorted({m["path"] for m in rec["mutations"]})
        meta = {"repo": rec["repo"], "level": rec["level"], "n_bugs": len(rec["mutations"]),
                "n_files": len(files), "hidden_total": rec["hidden_total"]}
        return Task(rec["id"], "swe", issue_text(rec, visible), None, meta)

    def reference_solution(self, task: Task, answer_tag: bool = True) -> str | None:
        """The level's fix as an answer in the one-shot edit format, for hints: engine-side only,
        never sent to the harness. None for multi-turn levels (no one answer to show the start
        of) and for a fix that spans lines."""
        shot = self._shots.get(task.id)
        return levels.fix_edit(shot) if shot is not None else None

    def curriculum_levels(self) -> tuple[int, int]:
        """The levels CURRICULUM["level"] can take: the run's `swe.levels`."""
        return min(self.levels), max(self.levels)

    def has_levels(self, task: Task) -> bool:
        return True

    def takes_turns(self, tasks: list[Task]) -> bool:
        """Whether some of `tasks` are multi-turn episodes (levels 2-4), not one-shot edits."""
        return any(t.id not in self._shots for t in tasks)

    def is_canary(self, task_id: str) -> bool:
        shot = self._shots.get(task_id)
        return bool(shot and shot.planted)

    # ------------------------------------------------------------ tasks
    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        """Training tasks of CURRICULUM["level"] (see the module docstring; None or absent = any),
        the nearest level when none exist."""
        level = curriculum.get("level")
        pool = self._train
        if level is not None and pool:
            nearest = min({t.meta["level"] for t in pool}, key=lambda lv: (abs(lv - int(level)), lv))
            pool = [t for t in pool if t.meta["level"] == nearest]
        if not pool:
            return []
        return rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]

    def _side(self, side: str) -> list[Task]:
        if side == "validation" or side == "test":
            multi = [t for k, t in self._tasks.items() if self._split[k] == "heldout"
                     and k not in self._shots and (in_validation(k) == (side == "validation"))]
            return multi + [self._tasks[k] for k, s in self._split.items() if s == side]
        return []

    def _mixed(self, side: str, n: int | None) -> list[Task]:
        """The side's tasks cut to `test_mix` shares of n (levels absent from the run give
        their share to none); each level's tasks in a fixed hashed order."""
        by_level: dict[int, list[Task]] = {}
        for t in _hashed(self._side(side)):
            by_level.setdefault(t.meta["level"], []).append(t)
        mix = {lv: w for lv, w in parse_mix(getattr(self.cfg, "test_mix", "")).items() if lv in by_level}
        if n is None or not mix:
            return [t for lv in sorted(by_level) for t in by_level[lv]]
        total = sum(mix.values())
        return [t for lv in sorted(mix) for t in by_level[lv][: round(n * mix[lv] / total)]]

    def validation_tasks(self, n: int | None = None) -> list[Task]:
        """Held-out validation tasks (the gate may read them), in the fixed level mix."""
        return self._mixed("validation", n)

    def test_tasks(self, n: int | None = None) -> list[Task]:
        """Held-out test tasks in the fixed level mix (never a validation mutant or task)."""
        return self._mixed("test", n)

    def heldout_tasks(self) -> list[Task]:
        return self.validation_tasks() + self.test_tasks()

    def task(self, task_id: str) -> Task:
        return self._tasks[task_id]

    def workspace(self, task: Task) -> Workspace:
        visible, _ = repos.split(mutated_files(self._recs[task.id]))
        return Workspace(visible, self.cfg.max_tool_chars)

    # ------------------------------------------------------------ episodes
    def run_episodes(self, tasks: list[Task], generate, chat_ids, harness,
                     sampling: dict | None = None) -> list[Episode]:
        """One episode per task (repeat a task for a group): one-shot levels in one
        generation batch, multi-turn levels advanced turn by turn in one batch; every
        episode comes back judged by the hidden tests.
        `sampling` overrides harness.sampling keys (e.g. temperature 0 for eval)."""
        samp = {**harness.sampling, **(sampling or {})}
        out: list[Episode | None] = [None] * len(tasks)
        shot_idx = [i for i, t in enumerate(tasks) if t.id in self._shots]
        multi_idx = [i for i, t in enumerate(tasks) if t.id not in self._shots]
        if shot_idx:
            eps = self._run_shots([tasks[i] for i in shot_idx], generate, chat_ids, harness, samp)
            for i, ep in zip(shot_idx, eps):
                out[i] = ep
        if multi_idx:
            runs = [Run(tasks[i], self.workspace(tasks[i]), harness.messages(tasks[i]), chat_ids, self.cfg)
                    for i in multi_idx]
            drive(runs, generate, samp, self.cfg, self.cfg.test_timeout_s, self.cfg.memory_mb)
            verdicts = self._judge([(r.task, r.ws.files) for r in runs])
            for i, r, v in zip(multi_idx, runs, verdicts):
                ep = r.episode()
                ep.verdict, ep.obs["tests"] = v, self._tests_obs(v)
                ep.obs["right_file"] = self._right_file(r.task, ep.obs)
                out[i] = ep
        return out

    def _run_shots(self, tasks: list[Task], generate, chat_ids, harness, samp: dict) -> list[Episode]:
        per_turn = max(1, min(int(samp.get("max_new_tokens", self.cfg.max_tokens_per_turn)),
                              self.cfg.max_tokens_per_turn))
        contexts, closings = [], []
        for t in tasks:
            msgs = harness.messages(t)
            ctx = list(chat_ids(msgs, True))
            contexts.append(ctx)
            closings.append(_suffix(chat_ids(msgs + [{"role": "assistant", "content": ""}], False), ctx)[0])
        try:
            gens = generate(contexts, per_turn, float(samp.get("temperature", 1.0)), float(samp.get("top_p", 1.0)))
            if len(gens) != len(tasks):
                raise ValueError(f"{len(gens)} generations for {len(tasks)} prompts")
        except EvoError:  # the run stops (no GPU memory left even at batch 1): not an episode's fault
            raise
        except Exception as e:  # the batch is lost, the episodes are data
            err = f"generate failed: {type(e).__name__}: {e}"[:300]
            v = Verdict(False, 0.0, "error", {"error": err})
            return [Episode("", [], [], "error", [], {"error": err}, v) for _ in tasks]
        episodes = [oneshot.episode(g, c, g.text) for g, c in zip(gens, closings)]
        for ep, (v, obs) in zip(episodes, self._judge_shots(tasks, [g.text for g in gens])):
            ep.verdict, ep.obs = v, obs
        return episodes

    def _judge_shots(self, tasks: list[Task], texts: list[str]) -> list[tuple[Verdict, dict]]:
        """Parse and apply each answer's edit; run the hidden tests where one applied."""
        out: list[tuple[Verdict, dict]] = []
        pending = []
        for t, text in zip(tasks, texts):
            shot = self._shots[t.id]
            edit, files, status, err = oneshot.apply_answer(shot, text)
            obs = oneshot.facts(shot, edit, status, err)
            if files is None:
                v = Verdict(False, 0.0, status, {"error": err, "passed": 0, "failed": 0, "errors": 0, "total": 0})
                obs["tests"] = self._tests_obs(v)
            else:
                v = None
                pending.append((len(out), t, files))
            out.append((v, obs))
        for (k, _task, _files), v in zip(pending, self._judge([(t, f) for _, t, f in pending])):
            out[k][1]["tests"] = self._tests_obs(v)
            out[k] = (v, out[k][1])
        return out

    def _judge(self, pairs: list[tuple[Task, dict[str, str]]]) -> list[Verdict]:
        """The hidden tests' verdict on each edited repository. Repositories that are the same
        files (a group's rollouts often make the same edit) are tested once and share it."""
        keys = [_repo_key(task.meta["repo"], files) for task, files in pairs]
        first: dict[str, int] = {}
        batch = []
        for (task, files), key in zip(pairs, keys):
            if key not in first:
                first[key] = len(batch)
                _, hidden = repos.split(repos.repo_files(task.meta["repo"]))
                batch.append((repos.hidden_eval_files(files, hidden), [repos.HIDDEN_DIR]))
        verdicts = []
        for run in repos.run_tests_many(batch, self.cfg.test_timeout_s, self.cfg.memory_mb):
            s = run.summary()
            ok = run.status == "passed"
            s["fraction_passed"] = round(run.passed / s["total"], 3) if s["total"] else 0.0
            verdicts.append(Verdict(ok, 1.0 if ok else 0.0, run.status, s))
        return [_copy(verdicts[first[key]]) for key in keys]

    def _right_file(self, task: Task, ev: dict) -> bool:
        """Localisation in a multi-turn episode: an applied edit touched a file with a bug."""
        bugs = {m["path"] for m in self._recs[task.id]["mutations"]}
        return any(e.get("ok") and e.get("path") in bugs for e in ev.get("edits") or [])

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
            if task.id in self._shots:
                return self._judge_shots([task], [completion])[0][0]
            return self._judge([(task, self.replay(task, completion).files)])[0]
        except Exception as e:
            return Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"[:300]})

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        """Evidence from a transcript (run_episodes already fills Episode.obs)."""
        try:
            if task.id in self._shots:
                shot = self._shots[task.id]
                edit, _files, status, err = oneshot.apply_answer(shot, completion)
                ev = oneshot.facts(shot, edit, status, err)
            else:
                ev = dict(self.replay(task, completion).ev)
                ev["right_file"] = self._right_file(task, ev)
        except Exception as e:
            ev = {"observe_error": f"{type(e).__name__}: {e}"[:300]}
        ev["tests"] = self._tests_obs(verdict)
        return ev
