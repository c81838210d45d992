"""Dead-group fraction at the start of training, per math suite, harness and curriculum level.

For each suite (two reasoning-gym datasets) and level: --tasks training tasks drawn
as a run's first steps draw them (MathEnv.sample_tasks, seed --seed), --group
rollouts each from the base model with the gpu profile's sampling (temperature 1.0,
the harness's 128 new tokens under the gpu cap of 256), judged by the evaluator and
scored by each harness through the one harness semantics (apply_harness). The
default and expert math harnesses share their prompt and sampling, so one set of
generations is scored by both. Prints, per row, dead groups of n with a Wilson 95%
interval, the share of mixed groups, and accuracy.

    .venv/bin/python benchmarks/stuck_suites.py --suite lcm,fraction_simplification --levels 1,0
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HARNESSES = ("math", "math_expert")


def measure(suite: list[str], level: int, args) -> list[str]:
    from backend.config import ModelConfig
    from backend.envs.math import MathEnv
    from backend.evolve.stats import wilson_interval
    from backend.harness.loader import Harness, default_harness_path
    from backend.policy.generate import make_generator
    from backend.policy.load import load_fast_policy
    from backend.policy.model import task_prompts
    from backend.rollout import from_generation, group_stats, score_all

    import torch

    lm = measure.lm = getattr(measure, "lm", None) or load_fast_policy(ModelConfig(), seed=args.seed)
    gen = make_generator("auto", lm.model, lm.tokenizer, lm.device, batch_size=args.batch, log=lambda m: None)
    env = MathEnv(suite)
    path = default_harness_path("math")
    harnesses = {h: Harness.from_file(path.with_name(f"{h}.py")) for h in HARNESSES}
    first = harnesses[HARNESSES[0]]
    assert all(h.spec.prompt == first.spec.prompt and h.sampling == first.sampling for h in harnesses.values())
    tasks = env.sample_tasks(args.tasks, random.Random(args.seed), {"level": level})
    slots = [(g, i, t, first.messages(t)) for g, t in enumerate(tasks) for i in range(args.group)]
    prompts = task_prompts(lm.tokenizer, slots)
    mnt = min(int(first.sampling["max_new_tokens"]), 256)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    gens = []
    for i in range(0, len(prompts), args.batch):  # one batch at a time, each reported (a slow shared CPU)
        gens += gen.generate([p[4] for p in prompts[i:i + args.batch]], mnt, float(first.sampling["temperature"]),
                             float(first.sampling["top_p"]))
        print(f"  {len(gens)}/{len(prompts)} generated, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    secs = time.perf_counter() - t0
    lines = []
    for name, h in harnesses.items():
        items = [from_generation(p, g) for p, g in zip(prompts, gens)]
        score_all(items, h, env, mnt)
        st = group_stats(items, h)
        n = st["n_groups"]
        dead = round(st["dead_group_frac"] * n)
        lo, hi = wilson_interval(dead, n)
        mixed = sum(len({s.verdict.correct for s in items if s.group == g}) == 2 for g in range(n))
        lines.append(f"| {'+'.join(suite)} | {level} | {name} | {n} | {dead} | {dead / n:.3f} | {lo:.3f}-{hi:.3f} "
                     f"| {mixed}/{n} | {st['verdict_acc']:.3f} | {st['truncated_frac']:.2f} | {secs:.0f} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="append", required=True, help="comma-separated datasets (repeatable)")
    ap.add_argument("--levels", default="1,0")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    print("| suite | level | harness | groups n | dead | dead frac | 95% Wilson | groups with both verdicts "
          "| accuracy | truncated | gen s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for suite in args.suite:
        for level in (int(x) for x in args.levels.split(",")):
            measure(suite.split(","), level, args)


if __name__ == "__main__":
    main()
