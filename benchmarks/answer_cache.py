"""`clean`'s cache (backend/envs/math_answer.py) on a math step's scoring: with it and without it,
in one process.

Each repeat makes a new batch of --tasks x --group rollouts (benchmarks/score_overlap.py's) and
times, in both variants with the order alternating:
- evaluator: `rollout.evaluate_all`, the task's checks on every rollout (the engine's thread);
- harness: `worker_main.handle` on the batch's apply request, the code a harness worker's child
  runs (rewards and diagnostics of the default math harness), here in-process.
"without" swaps `clean` for its uncached body; "with" empties the cache first, so each batch is
the first the process sees, as a run's step is. Prints milliseconds a batch (mean +- 95%
interval), the ratio, and whether both variants gave the same verdicts and harness results.

    .venv/bin/python benchmarks/answer_cache.py --tasks 64 --group 8 --repeats 8
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    from backend.envs import math_answer
    from backend.envs.math import MathEnv
    from backend.harness import worker_main
    from backend.harness.loader import load_default
    from backend.rollout import as_rollout, evaluate_all
    from benchmarks.code_step import interval
    from benchmarks.score_overlap import batch, batch_arguments

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    batch_arguments(ap, repeats=8)
    args = ap.parse_args(argv)
    harness, env = load_default("math"), MathEnv(["chain_sum"])
    cached = math_answer.clean

    def use(variant: str) -> None:
        math_answer.clean = cached if variant == "with" else math_answer._clean
        math_answer.forget_cleaned()

    ms = {(part, v): [] for part in ("evaluator", "harness") for v in ("without", "with")}
    same = True
    for i in range(-1, args.repeats):  # -1: a warm-up (math-verify and the regexes load)
        items = batch(args.tasks, args.group, seed=1000 + i)
        out = {}
        for variant in ("without", "with") if i % 2 == 0 else ("with", "without"):
            use(variant)
            run = copy.deepcopy(items)
            t = time.perf_counter()
            evaluate_all(run, env)
            t_eval = time.perf_counter()
            req = {"op": "apply", "code": harness.code, "weights": harness.spec.weights,
                   "rollouts": [as_rollout(s, 256).view() for s in run]}
            t_req = time.perf_counter()
            res = worker_main.handle(req)
            t_end = time.perf_counter()
            if i >= 0:
                ms["evaluator", variant].append((t_eval - t) * 1000)
                ms["harness", variant].append((t_end - t_req) * 1000)
            out[variant] = ([(s.verdict.status, s.verdict.correct) for s in run], res)
        same &= out["with"] == out["without"]
    use("with")
    print(f"{args.tasks} x {args.group} = {args.tasks * args.group} rollouts, {args.repeats} new batches a variant")
    print(f"{'part':<10} {'without (ms)':>22} {'with (ms)':>22} {'without/with':>13}")
    for part in ("evaluator", "harness"):
        a, b = ms[part, "without"], ms[part, "with"]
        print(f"{part:<10} {interval(a):>22} {interval(b):>22} {sum(a) / sum(b):>12.2f}x")
    print(f"same verdicts and harness results: {same}")


if __name__ == "__main__":
    main()
