"""Synthetic runs for tests and demos: rollouts the way SmolLM2-135M writes them.

`build_run` writes a real run database (real migrations, the real default
harness scoring and diagnosing every rollout, the real math evaluator) whose
completions mostly end "The answer is 12" without <answer> tags. Under the
default harness nearly every group is dead; a lenient-extraction harness
revives them. `copy_rate` plants rollouts that copy a number from the
question, for reward-hack tests.

    >>> store = build_run(tmp_path / "run.db", steps=6)     # doctest: +SKIP
    >>> ctx = context(store, step=6)                        # doctest: +SKIP
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from backend.config import RunConfig, to_dict
from backend.envs.math import answers_match, extract_lenient
from backend.harness.loader import Harness, default_harness_path, sha
from backend.harness.semantics import apply_harness, batch_from_rows, stored_groups
from backend.store import Store, dumps, now

from backend.evolve.context import EvolveContext


def _completion(rng: random.Random, a: int, b: int, mix: dict) -> str:
    s = a + b
    kind = rng.choices(list(mix), weights=list(mix.values()))[0]
    if kind == "correct":
        return rng.choice([f"{a} + {b} = {s}. The answer is {s}", f"We add {a} and {b}.\nThe answer is {s}"])
    if kind == "tagged":
        return f"{a} + {b} = {s}. <answer>{s}</answer>"
    if kind == "tagged_wrong":
        return f"{a} + {b} = {s + rng.choice([-2, 1, 3])}. <answer>{s + rng.choice([-2, 1, 3, 7])}</answer>"
    if kind == "copied":
        return f"The answer is {rng.choice([a, b])}"
    if kind == "rambling":
        return "I am not sure how to solve this problem, let me think about it more carefully"
    return f"{a} + {b} = {s + rng.choice([-3, -1, 1, 2, 10])}. The answer is {s + rng.choice([-2, 1, 3, 7])}"


MIX = {"correct": 0.35, "wrong": 0.5, "tagged": 0.03, "rambling": 0.12, "copied": 0.0, "tagged_wrong": 0.0}
"""Completion kinds and their weights (a zero weight at the end leaves the draws of the others unchanged)."""


def score_rows(h: Harness, tasks: list[tuple[int, int]], completions: list[list[str]], step: int,
               version: int) -> tuple[list[dict], list[list[dict]]]:
    """Rollout rows and diagnosis rows, scored by harness `h` and judged by the real evaluator."""
    rows, diags, batch = [], [], []
    for g, ((a, b), group) in enumerate(zip(tasks, completions)):
        task = {"id": f"syn:{step}:{g}", "domain": "math", "question": f"What is {a} + {b}?",
                "answer": str(a + b), "meta": {}}
        for i, text in enumerate(group):
            obs = {"_max_new_tokens": 128}
            ok = answers_match(task["answer"], extract_lenient(text))
            rows.append({"step": step, "domain": "math", "task_id": task["id"], "group_idx": g, "idx": i,
                         "prompt": task["question"], "completion": text, "prompt_tokens": 8,
                         "completion_tokens": len(text.split()),
                         "verdict": "correct" if ok else ("no_answer" if extract_lenient(text) is None else "wrong"),
                         "correct": int(ok), "finish": "stop", "status": "ok", "harness_version": version,
                         "policy_version": step, "task_json": dumps(task), "obs_json": dumps(obs)})
    out = apply_harness(h, batch_from_rows(rows))
    for row, o in zip(rows, out.rollouts):
        row.update(reward=o.reward, rewards_json=dumps(dict(o.components, **({"_errors": o.errors} if o.errors
                                                                            else {}))),
                   labels=",".join(sorted(o.label_set)), advantage=o.advantage, kept=int(o.kept))
        diags.append([{"step": step, "label": lbl, "evidence": ev, "validity": int(lbl in h.validity),
                       "harness_version": version} for lbl, ev in o.labels])
    return rows, diags


def add_steps(store: Store, first: int, last: int, seed: int = 0, groups: int = 4, group_size: int = 4,
              mix: dict | None = None) -> None:
    """Generate and commit steps first..last under the run's active harness."""
    version = store.run()["harness_version"]
    h = Harness.from_code(store.get("harness_versions", version)["code"])
    mix = dict(MIX, **(mix or {}))
    for step in range(first, last + 1):
        rng = random.Random(f"{seed}:{step}")
        tasks = [(rng.randint(2, 40), rng.randint(2, 40)) for _ in range(groups)]
        comps = [[_completion(rng, a, b, mix) for _ in range(group_size)] for a, b in tasks]
        rows, diags = score_rows(h, tasks, comps, step, version)
        by_group = stored_groups(rows)
        dead = sum(g.dead for g in by_group) / len(by_group)
        thr = 0.5 * sum(w for w in h.weights.values() if w > 0)
        store.commit_step({
            "step": step, "created_at": now(), "harness_version": version, "policy_version": step,
            "n_rollouts": len(rows), "n_groups": groups, "dead_group_frac": dead,
            "reward_mean": statistics.fmean(r["reward"] for r in rows),
            "verdict_acc": statistics.fmean(r["correct"] for r in rows),
            "agreement": statistics.fmean((r["reward"] > thr) == bool(r["correct"]) for r in rows),
            "mean_completion_tokens": statistics.fmean(r["completion_tokens"] for r in rows),
            "entropy": 1.0 - 0.01 * step}, rows, diags,
            policy_version={"parent": step - 1 or None, "step": step, "checkpoint": "",  # the store numbers it: step
                            "harness_version": version, "created_at": now()})


def build_run(path, steps: int = 6, seed: int = 0, harness_code: str | None = None, mix: dict | None = None,
              cfg: RunConfig | None = None, **kw) -> Store:
    """A fresh run database with harness v1 (default math, or `harness_code`) and `steps` steps."""
    cfg = cfg or RunConfig()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    store = Store.open(Path(path))
    store.create_run("synthetic", to_dict(cfg), seed, steps)
    code = harness_code or default_harness_path("math").read_text()
    vid = store.add_harness_version(code, None, "", "active", sha(code), note="default")
    store.set_run(harness_version=vid, status="running")
    add_steps(store, 1, steps, seed=seed, mix=mix, **kw)
    return store


class StandIn:
    """The live policy's part in a round (`backend.evolve.Policy`), played by a function
    `probe(harness, n_tasks) -> rollout rows` (`make_probe`); no trials."""

    trials = False

    def __init__(self, probe) -> None:
        self.probe = probe

    def generate(self, harness: Harness, n_tasks: int) -> list[dict]:
        return self.probe(harness, n_tasks)

    def trial(self, candidate: Harness):
        raise AssertionError("the stand-in policy runs no trials")


def context(store: Store, step: int | None = None, cfg: RunConfig | None = None, probe=None) -> EvolveContext:
    """An EvolveContext on the run's active harness, with `probe` as its policy's generation
    (none: replay only), whose log lines are also written as events at once."""
    run = store.run()
    vid = run["harness_version"]
    return EvolveContext(store=store, cfg=cfg or RunConfig(), step=step if step is not None else run["step"],
                         harness_version=vid, harness=Harness.from_code(store.get("harness_versions", vid)["code"]),
                         policy=StandIn(probe) if probe is not None else None,
                         echo=lambda level, msg: store.log(level, msg, kind="evolve"))


def make_probe(seed: int = 0, groups: int = 2, group_size: int = 4):
    """A stand-in for the loop's probe: a policy that writes tags more often when the
    prompt shows an example, and truncates less with more tokens."""
    def probe(h: Harness, n_tasks: int) -> list[dict]:
        rng = random.Random(f"{seed}:{h.prompt.get('system', '')}")
        tagged = 0.5 if "Example" in h.prompt.get("system", "") else 0.03
        tasks = [(rng.randint(2, 40), rng.randint(2, 40)) for _ in range(max(n_tasks, 1))]
        comps = [[_completion(rng, a, b, dict(MIX, tagged=tagged)) for _ in range(group_size)] for a, b in tasks]
        rows, _ = score_rows(h, tasks, comps, 0, 0)
        return rows
    return probe


def add_eval(store: Store, step: int, correct: list[bool], split: str = "validation") -> float:
    """Store one held-out evaluation of `split` with per-problem outcomes (problem i is
    `{split}:{i}` at every step, so evaluations pair up problem by problem)."""
    run = store.run()
    results = [{"task_id": f"{split}:{i}", "correct": bool(c), "status": "correct" if c else "wrong",
                "reward": float(c)} for i, c in enumerate(correct)]
    return store.record_evals(step, {split: results}, {}, run["policy_version"], run["harness_version"])[split]


def outcomes(n: int, right: int) -> list[bool]:
    """`right` of `n` problems correct: the first ones, so a larger count is a superset."""
    return [i < right for i in range(n)]
