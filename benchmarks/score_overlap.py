"""Scoring a math step's rollouts: the harness worker alongside the evaluator (today) against
one after the other (before), in one run. Each repeat scores a new batch, with `clean`'s cache
emptied first (backend/envs/math_answer.py), as a run's step meets its completions.

--tasks x --group rollouts like a policy's (a short derivation, a tagged or bare answer, some
cut off); each repeat scores its batch in both orders, alternating which goes first, after a
warm-up that starts the harness worker. Prints milliseconds a batch (mean +- 95% interval) and
whether the two orders gave the same rewards, labels, advantages and verdicts.

    .venv/bin/python benchmarks/score_overlap.py --tasks 64 --group 8 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def batch(tasks: int, group: int, seed: int = 0) -> list:
    from backend.envs.base import Task
    from backend.rollout import Scored

    rng = random.Random(seed)
    out = []
    for g in range(tasks):
        a, b, c = rng.randint(2, 999), rng.randint(2, 999), rng.randint(2, 99)
        task = Task(id=f"t{g}", question=f"What is {a} + {b} - {c}?", answer=str(a + b - c), domain="math",
                    meta={"dataset": "chain_sum"})
        for i in range(group):
            guess = a + b - c + rng.choice([0, 0, 1, -3])
            text = rng.choice([f"{a} + {b} = {a + b}, minus {c} is {guess}. <answer>{guess}</answer>",
                               f"We add and subtract: the answer is {guess}",
                               f"Let me think. {a} plus {b}... " * rng.randint(1, 8) + f"<answer>{guess}</answer>"])
            n = len(text) // 4 + 1
            out.append(Scored(task=task, group=g, idx=i, prompt_text="", prompt_ids=[1], completion=text,
                              completion_ids=list(range(n)), loss_mask=[1] * n,
                              finish=rng.choice(["stop"] * 5 + ["length"]), verdict=None, obs={}))
    return out


def batch_arguments(ap: argparse.ArgumentParser, repeats: int) -> None:
    """The command-line arguments of the benchmarks that score `batch`es: its shape, and how many."""
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=repeats)


def main(argv=None) -> None:
    from backend.envs.math import MathEnv
    from backend.envs.math_answer import forget_cleaned
    from backend.harness.loader import load_default
    from backend.rollout import score_all
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    batch_arguments(ap, repeats=5)
    args = ap.parse_args(argv)
    harness = load_default("math")
    today = MathEnv(["chain_sum"])
    before = copy.copy(today)
    before.observes_verdict = True  # the order before: the evaluator, then the harness
    score_all(batch(args.tasks, args.group, seed=-1), harness, today, 256)  # warm-up: the worker starts
    ms: dict[str, list[float]] = {"before": [], "today": []}
    results: dict[str, list] = {"before": [], "today": []}
    for i in range(args.repeats):
        items = batch(args.tasks, args.group, seed=i)  # a step's completions: new ones every repeat
        for name, env in ((("before", before), ("today", today)) if i % 2 == 0 else
                          (("today", today), ("before", before))):
            run = copy.deepcopy(items)
            forget_cleaned()  # the first time the engine sees them, as in a run
            t = time.perf_counter()
            score_all(run, harness, env, 256)
            ms[name].append((time.perf_counter() - t) * 1000)
            results[name] += [(s.reward, s.labels, s.kept, s.advantage, s.verdict.correct) for s in run]
    print(f"{args.tasks} x {args.group} = {args.tasks * args.group} rollouts, {args.repeats} repeats an order")
    print(f"{'order':<8} {'ms a batch (mean +- 95%)':>26} {'best':>8}")
    for name, xs in ms.items():
        print(f"{name:<8} {interval(xs):>26} {min(xs):>8.1f}")
    b, t = (sum(ms[k]) / len(ms[k]) for k in ("before", "today"))
    print(f"today is {b / t:.2f}x the speed of before; same scores: {results['before'] == results['today']}")


if __name__ == "__main__":
    main()
