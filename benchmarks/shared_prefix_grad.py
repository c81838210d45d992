"""The LoRA gradient of `train.shared_prefix` against the full pass, on the configured model.

Three groups of four rows with prompts of --prompt MIN,MAX random tokens and completions of 4 to
32, LoRA B weights set non-zero; one `GRPOTrainer.step` each way from the same weights in the
model's dtype, and the full pass again with the base weights in fp32 as the reference. Prints
each path's relative gradient error against the reference and the two paths' distance. In bf16
both paths round (about 10% here, random-token prompts); a path that drops or doubles a term is
tens of percent further off.

    .venv/bin/python benchmarks/shared_prefix_grad.py --dtype bf16 --prompt 300,650    # CPU: minutes
    python3 benchmarks/shared_prefix_grad.py --device cuda --attn eager     # and --attn sdpa: which kernel
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    import torch

    from backend.config import TrainConfig, load_config
    from backend.policy.grpo import GRPOTrainer, Sample
    from backend.policy.load import load_fast_policy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--prompt", default="300,650")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attn", default="", help="attention implementation (eager, sdpa); default: the model's")
    args = ap.parse_args(argv)
    lo, hi = (int(x) for x in args.prompt.split(","))
    cfg = load_config(None, [f"model.device={args.device}", f"model.dtype={args.dtype}"])
    lm = load_fast_policy(cfg.model, None, seed=0)
    if args.attn:
        lm.model.get_base_model().set_attn_implementation(args.attn)
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(3):
        prompt = torch.randint(3, 40000, (int(torch.randint(lo, hi + 1, (), generator=g)),), generator=g).tolist()
        for _ in range(4):
            c = int(torch.randint(4, 33, (), generator=g))
            rows.append(Sample(prompt, torch.randint(3, 40000, (c,), generator=g).tolist(), [1] * c,
                               float(torch.randn((), generator=g))))
    named = [(n, p) for n, p in lm.model.named_parameters() if p.requires_grad]
    with torch.no_grad():
        for n, p in named:
            if "lora_B" in n:
                g_n = torch.Generator().manual_seed(len(n))  # on the CPU: the same weights on any device
                p.copy_(torch.randn(p.shape, generator=g_n) * 0.05)

    def grad(shared: bool) -> torch.Tensor:
        before = [p.detach().clone() for _, p in named]
        t = GRPOTrainer(lm.model, lm.tokenizer, TrainConfig(lr=1e-3, micro_batch=6, auto_micro_batch=False,
                                                            shared_prefix=shared), lm.device)
        t.step(rows)
        out = torch.cat([p.grad.detach().double().flatten().cpu() for _, p in named])
        with torch.no_grad():
            for (_, p), b in zip(named, before):
                p.copy_(b)
        return out

    t0 = time.perf_counter()
    full, shared = grad(False), grad(True)
    base = lm.model.get_base_model()
    dtypes = {n: p.dtype for n, p in base.named_parameters()}
    base.float()
    ref = grad(False)
    for n, p in base.named_parameters():
        p.data = p.data.to(dtypes[n])
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    attn = base.config._attn_implementation
    print(f"{args.device} {args.dtype} attention {attn}, prompts {lo}-{hi} tokens, 12 rows: gradient error "
          f"against the fp32 full pass: full {rel(full, ref):.4f}, shared {rel(shared, ref):.4f}; shared against "
          f"full {rel(shared, full):.4f} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
