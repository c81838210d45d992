"""One GRPO training step with `train.shared_prefix` off and on, on an SWE-like shape.

    python benchmarks/shared_prefix.py [--groups 4] [--group-size 8] [--prompt 1200] [--completion 150]
                                       [--device cpu]

A random Llama (`--hidden` wide, `--layers` deep, vocabulary `--vocab`) with a LoRA adapter on
every attention projection trains one step (lr 0, so each repeat starts from the same weights) on
`--groups` groups of `--group-size` rollouts: one prompt of `--prompt` tokens per group, completions
of `--completion` tokens less up to a tenth, every completion token trained. Passes of
`--micro-batch` rows in the rollouts' order (a pass is one group at the default sizes). Each
mode runs `--repeats` times after one warm-up, alternating; the table gives the median and the
fastest step, the tokens the passes computed (padding included) and the step's loss, which
must agree between the modes. One thread by default (`--threads`): on a machine shared with other
work, threads that wait on each other at every small op measure the sharing, not the step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_model(a):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=2 * a.hidden,
                      num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False,
        task_type="CAUSAL_LM"))
    return model.float().to(a.device).eval()


def build_samples(a):
    import torch

    from backend.policy.grpo import Sample

    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(a.groups):
        prompt = torch.randint(1, a.vocab, (a.prompt,), generator=g).tolist()
        for _ in range(a.group_size):
            c = a.completion - int(torch.randint(0, a.completion // 10 + 1, (), generator=g))
            out.append(Sample(prompt, torch.randint(1, a.vocab, (c,), generator=g).tolist(), [1] * c,
                              float(torch.randn((), generator=g))))
    return out


def computed_tokens(trainer, samples, shared: bool) -> int:
    from backend.policy import prefix

    total = 0
    for rows in trainer.passes:
        batch = [samples[i] for i in rows]
        if shared and prefix.applies(trainer.model, batch):
            total += prefix.computed_tokens(batch)
        else:
            total += len(batch) * max(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
    return total


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("groups", 4), ("group-size", 8), ("prompt", 1200), ("completion", 150),
                          ("micro-batch", 8), ("repeats", 3), ("hidden", 128), ("layers", 4), ("vocab", 8192),
                          ("threads", 1)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--device", default="cpu", help="cpu or cuda (fp32 either way)")
    a = p.parse_args(argv)

    import torch

    from backend.config import TrainConfig
    from backend.policy.grpo import GRPOTrainer

    torch.set_num_threads(a.threads)
    model, samples = build_model(a), build_samples(a)
    trainers = {shared: GRPOTrainer(model, SimpleNamespace(pad_token_id=0), TrainConfig(
        lr=0.0, micro_batch=a.micro_batch, auto_micro_batch=False, shared_prefix=shared), a.device)
        for shared in (False, True)}
    times: dict[bool, list[float]] = {False: [], True: []}
    losses: dict[bool, float] = {}
    for r in range(a.repeats + 1):  # the first round warms up
        for shared, trainer in trainers.items():
            t0 = time.perf_counter()
            losses[shared] = trainer.step(samples)["loss"]
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            if r:
                times[shared].append(time.perf_counter() - t0)

    print(f"shape: {a.groups} groups x {a.group_size}, prompt {a.prompt}, completion <= {a.completion}, "
          f"passes of {a.micro_batch}; Llama hidden {a.hidden} x {a.layers} layers, vocab {a.vocab}, "
          f"LoRA r 8, fp32; {a.device}, {torch.get_num_threads()} threads, {a.repeats} repeats")
    print(f"{'train.shared_prefix':<20} {'median s':>9} {'min s':>7} {'tokens':>8} {'loss':>12}")
    for shared in (False, True):
        ts = times[shared]
        print(f"{str(shared).lower():<20} {statistics.median(ts):>9.2f} {min(ts):>7.2f} "
              f"{computed_tokens(trainers[shared], samples, shared):>8} {losses[shared]:>12.6g}")
    speedup = statistics.median(times[False]) / statistics.median(times[True])
    print(f"speedup (median): {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
