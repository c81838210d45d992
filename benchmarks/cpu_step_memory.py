"""Peak memory of one code-domain training update on the CPU, with and without the memory plan.

    python benchmarks/cpu_step_memory.py [--fixed] [--source humaneval] [--new 256]

The update of step 1 of `evotui run --profile cpu --set domain=code` (seed 0): the same four
tasks (the loop's step seed), prompts from the default code harness, and every one of the
4 x 4 rollouts trained with a completion of `--new` tokens (the harness's 256-token budget
used in full: the worst case of a step). `--fixed`: the CPU's old rule, `train.micro_batch`
(8) rows a pass whatever their length; default: the planned micro-batch
(`memory.cpu_micro_batch`). Prints the micro-batch and the process's peak resident memory
after loading and after the update (ru_maxrss). One measurement a process; run them one
after the other, not side by side.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed", action="store_true", help="the old CPU rule: train.micro_batch rows a pass")
    p.add_argument("--source", default="humaneval", help="code.source (generated or humaneval)")
    p.add_argument("--new", type=int, default=256, help="completion tokens per rollout")
    p.add_argument("--tasks", type=int, default=0, help="the first N of the step's tasks (0: all; the peak "
                   "needs only as many rows as one pass holds)")
    a = p.parse_args(argv)

    import torch

    from backend.config import RunConfig, load_config
    from backend.envs import make_env
    from backend.harness.loader import load_default
    from backend.policy.grpo import GRPOTrainer, Sample
    from backend.policy.load import load_fast_policy
    from backend.policy.model import chat_ids

    has_source = hasattr(RunConfig().code, "source")  # older trees have HumanEval only
    sets = ["domain=code", "profile=cpu"] + ([f"code.source={a.source}"] if a.source and has_source else [])
    if a.fixed:
        sets.append("train.auto_micro_batch=false")
    cfg = load_config(None, sets)
    lm = load_fast_policy(cfg.model, None, seed=cfg.seed)
    loaded = peak_gib()
    harness = load_default("code")
    env = make_env(cfg)
    rng = random.Random(cfg.seed * 1_000_003 + 1)  # Engine.seed_step(1)
    torch.manual_seed(cfg.seed * 1_000_003 + 1)
    tasks = env.sample_tasks(cfg.train.tasks_per_step, rng, harness.curriculum)[:a.tasks or None]
    g = torch.Generator().manual_seed(0)
    samples = []
    for task in tasks:
        prompt = chat_ids(lm.tokenizer, harness.messages(task))
        for i in range(cfg.train.group_size):
            done = torch.randint(3, len(lm.tokenizer) - 1, (a.new,), generator=g).tolist()
            samples.append(Sample(prompt, done, [1] * a.new, float((i % 2) * 2 - 1)))
    trainer = GRPOTrainer(lm.model, lm.tokenizer, cfg.train, lm.device)
    t0 = time.perf_counter()
    stats = trainer.step(samples)
    longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    print(f"rule: {'fixed' if a.fixed else 'planned'}; {len(samples)} rows, longest {longest} tokens; "
          f"micro-batch {trainer.last_shape['micro_batch']} x {trainer.last_shape['micro_batches']} passes; "
          f"update {time.perf_counter() - t0:.0f} s, loss {stats['loss']:.4f}")
    print(f"peak RSS: {loaded:.2f} GiB after loading, {peak_gib():.2f} GiB after the update")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
