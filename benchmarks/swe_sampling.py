"""What a GRPO group of one-shot SWE answers holds at a sampling temperature (CPU).

    python benchmarks/swe_sampling.py --temperatures 0.5,0.7,1.0 [--tasks 12] [--group 8] [--level 0]

For each temperature: `--group` sampled answers to each of `--tasks` training tasks (a seeded
sample of the train split: never a held-out task), each judged as a training rollout is
(`SweEnv._judge_shots`: the edit parsed, applied, the hidden tests run in the sandbox), and the
counts of well-formed edits, applied edits and resolves. An answer that does not apply earns
none of the expert harness's test shaping, so the applied share is how much of a group can tell
its rollouts apart beyond the format. The prompt is the expert SWE harness's; at most 192 new
tokens, its budget. torch is seeded once per temperature, so a rerun repeats the counts.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperatures", default="0.5,0.7,1.0")
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--level", type=int, default=0, choices=(0, 1))
    ap.add_argument("--seed", type=int, default=11, help="which training tasks (random.Random(seed))")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch

    from backend.config import ModelConfig, SweConfig
    from backend.envs.swe import SweEnv
    from backend.harness.loader import load_default
    from backend.policy.model import load_base

    torch.set_num_threads(args.threads)
    lm, tok, _, _ = load_base(ModelConfig(device="cpu"))
    lm.eval()
    harness = load_default("swe_expert")
    env = SweEnv(SweConfig(levels=str(args.level), leak_canaries=False))
    tasks = env.sample_tasks(args.tasks, random.Random(args.seed), {"level": args.level})
    print(f"level {args.level}, {args.tasks} training tasks x {args.group}, expert SWE prompt, <= 192 new tokens")
    print("| temperature | rollouts | well-formed | applied | resolved |\n|---|---|---|---|---|")
    for temp in (float(x) for x in args.temperatures.split(",")):
        torch.manual_seed(0)
        counts = [0, 0, 0, 0]
        for t in tasks:
            ids = tok.apply_chat_template(harness.messages(t), add_generation_prompt=True, return_tensors="pt")
            ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
            out = lm.generate(ids.repeat(args.group, 1), do_sample=True, temperature=temp, top_p=1.0,
                              max_new_tokens=192, pad_token_id=tok.pad_token_id)
            texts = tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
            for verdict, obs in env._judge_shots([t] * args.group, texts):
                for k, hit in enumerate((True, obs.get("well_formed"), obs.get("applied"), verdict.correct)):
                    counts[k] += bool(hit)
        print(f"| {temp} | " + " | ".join(map(str, counts)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
