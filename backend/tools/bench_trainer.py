"""`evotui bench --only trainer`: the GRPO trainer's step with each new setting against today's.

One GRPO update (`GRPOTrainer.step`, the loop's own call) over a step's worth of
rollouts of mixed length, on the configured model, in one process on one device:

- today     passes in the rollouts' order, each padded to its longest row, the
            micro-batch planned for the step's longest row (the defaults);
- buckets   `train.length_buckets`: rows sorted by length, each pass padded to its
            own longest and as many rows as the memory plan allows at that length;
- causal    buckets and `train.causal_only`: attention without the padding mask
            (the causal kernel);
- nondet    causal without torch's deterministic algorithms
            (`train.deterministic = false`): what determinism costs on this path;
- compiled  causal and `train.compile` (the first step compiles);
- prefix    `train.shared_prefix`: each group's prompt computed once a pass
            (backend/policy/prefix.py), on today's passes;
- lora16    causal and `train.lora_base_dtype` (LoRA's matmuls in bf16);
- wide      lora16 with passes of up to 65,536 tokens (`train.pass_tokens`): fewer, larger
            passes launch fewer kernels;
- widec     wide and `train.compile`.

Variants share one model: a compiled one is made eager again after it (`release_compiled`).

The rollouts: `--tasks` x `--group` rows, prompts of 80 to 130 tokens (the default
math harness's; `--trainer-prompt MIN,MAX` for others), completions uniform up to
`--step-new` tokens with a third of the groups' rows at the cap (truncated), random
tokens, a non-zero advantage per row.
lr is 0, so every variant sees the same weights: the table gives each one's loss and
LoRA gradient against today's (a one-epoch step's loss is -sum(A * mask) / denom on any path:
its old log-probs are its own, ratio 1) and whether
its repeats gave bit-identical gradients (what twins need); the log says where a gradient
differs (`grad_differences`: per kind of LoRA module and its worst modules). tok/s counts the rows'
own tokens, not padding; "padding" is the share of computed tokens that were padding.
With `--profile`, one more step of each variant runs under torch.profiler and the log
gets its kernel times (where a step's device time goes); it is not in the timings.
"""

from __future__ import annotations

import random
import re

import torch

VARIANTS = {
    "today": {},
    "buckets": {"length_buckets": True},
    "causal": {"length_buckets": True, "causal_only": True},
    "nondet": {"length_buckets": True, "causal_only": True, "deterministic": False},
    "compiled": {"length_buckets": True, "causal_only": True, "compile": True},
    "prefix": {"shared_prefix": True},
    "lora16": {"length_buckets": True, "causal_only": True, "lora_base_dtype": True},
}
VARIANTS["wide"] = {**VARIANTS["lora16"], "pass_tokens": 65536}
VARIANTS["widec"] = {**VARIANTS["wide"], "compile": True}
NAMES = {"today": "today: passes in order", "buckets": "buckets (train.length_buckets)",
         "causal": "buckets + train.causal_only", "nondet": "buckets + causal_only, deterministic=false",
         "compiled": "buckets + causal_only + train.compile", "prefix": "train.shared_prefix",
         "lora16": "buckets + causal_only + train.lora_base_dtype",
         "wide": "buckets + causal_only + lora_base_dtype + train.pass_tokens=65536",
         "widec": "wide + train.compile"}


def rollouts(n: int, group: int, new: int, vocab: int, seed: int = 0, prompt: tuple[int, int] = (80, 130)) -> list:
    """`n` rows of prompt and completion token ids as a math step's rollouts are shaped (module doc);
    `prompt`: the range of prompt lengths."""
    from backend.policy.grpo import Sample

    rng = random.Random(seed)
    out = []
    for g in range(-(-n // group)):
        prompt_ids = [rng.randrange(3, vocab) for _ in range(rng.randint(*prompt))]
        for _ in range(min(group, n - g * group)):
            c = new if rng.random() < 1 / 3 else rng.randint(4, new)
            comp = [rng.randrange(3, vocab) for _ in range(c)]
            out.append(Sample(prompt_ids, comp, [1] * c, rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 1.5)))
    return out


def _grads(model) -> dict[str, torch.Tensor]:
    """Each trainable parameter's gradient, flat, float32, on the CPU, by parameter name."""
    return {n: p.grad.detach().flatten().float().cpu() for n, p in model.named_parameters()
            if p.requires_grad and p.grad is not None}


def _flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat(list(grads.values()))


def _module(name: str) -> str:
    """`layers.22.self_attn.k_proj` of a LoRA parameter's name (the name itself for others)."""
    m = re.search(r"layers\.(\d+)\.\w+\.(\w+)\.lora_", name)
    return f"layers.{m.group(1)}.{m.group(2)}" if m else name


def grad_differences(ours: dict, base: dict, worst: int = 3) -> str:
    """Where two gradients differ, on one line: |dgrad|/|grad| of each kind of LoRA module (all
    layers together) and of the `worst` single modules, against `base`. A path that misses or
    doubles a term shows as a few modules or kinds far off; float rounding as all alike."""
    parts: dict[str, list[float]] = {}
    for n, g in base.items():
        key = _module(n)
        d, r = parts.setdefault(key, [0.0, 0.0])
        parts[key] = [d + float((ours[n] - g).square().sum()), r + float(g.square().sum())]
    kinds: dict[str, list[float]] = {}
    for key, (d, r) in parts.items():
        k = kinds.setdefault(key.rsplit(".", 1)[-1], [0.0, 0.0])
        k[0], k[1] = k[0] + d, k[1] + r
    rel = lambda d, r: (d / r) ** 0.5 if r > 0 else (0.0 if d == 0 else float("inf"))  # noqa: E731
    by_kind = ", ".join(f"{k} {rel(*v):.1e}" for k, v in sorted(kinds.items()))
    top = sorted(parts.items(), key=lambda kv: -rel(*kv[1]))[:worst]
    return f"by kind {by_kind}; worst {', '.join(f'{k} {rel(*v):.1e}' for k, v in top)}"


def measure(b, model, tok, samples, settings: dict) -> dict:
    """Warm-up step, then `b.a.reps` timed steps (at least 2) of a fresh trainer with `settings`."""
    from backend.config import TrainConfig
    from backend.policy.grpo import GRPOTrainer

    cfg = TrainConfig(lr=0.0, micro_batch=b.a.micro, max_grad_norm=1e9, auto_micro_batch=True, **settings)
    trainer = GRPOTrainer(model, tok, cfg, b.device)
    warm_s, stats = b.timed(lambda: trainer.step(samples))
    times, grads = [], []
    if b.cuda:
        torch.cuda.reset_peak_memory_stats(b.device)
    for _ in range(max(2, b.a.reps)):
        t, stats = b.timed(lambda: trainer.step(samples))
        times.append(t)
        grads.append(_grads(model))
    shape = trainer.last_shape
    if b.a.profile:
        profile(b, lambda: trainer.step(samples))
    trainer.release_compiled()  # the next variant shares the model
    out = {"s": sorted(times)[len(times) // 2], "times": times, "warm_s": warm_s, "loss": stats["loss"],
           "grad": grads[0], "repeats_identical": all(torch.equal(_flat(grads[0]), _flat(g)) for g in grads[1:]),
           "passes": shape["micro_batches"], "rows": shape["micro_batch"], "seq_tokens": shape["seq_tokens"],
           "padded_tokens": shape["padded_tokens"],
           "peak_gib": torch.cuda.max_memory_allocated(b.device) / (1 << 30) if b.cuda else 0.0}
    return out


def profile(b, step) -> None:
    """Log the kernel times of one `step()` (CUDA; CPU ops on the CPU), largest first."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if b.cuda else [])
    with torch_profile(activities=acts) as prof:
        step()
        b.sync()
    key = "cuda_time_total" if b.cuda else "cpu_time_total"
    b.log("trainer profile, one step:\n" + prof.key_averages().table(sort_by=key, row_limit=25,
                                                                     max_name_column_width=60))


def trainer_rows(b, model, tok, names: list[str]) -> list[dict]:
    """Row fields: each variant of `names` (keys of VARIANTS) against today's."""
    from backend.policy.shape import Spec, unwrap

    vocab = Spec.of(unwrap(model).config).vocab
    low, high = (int(x) for x in b.a.trainer_prompt.split(","))
    samples = rollouts(b.a.tasks * b.a.group, b.a.group, b.a.step_new, vocab, prompt=(low, high))
    names = ["today"] + [n for n in names if n != "today"]
    res = {}
    for name in names:
        try:
            res[name] = measure(b, model, tok, samples, VARIANTS[name])
        except Exception as e:  # a variant that fails is a row, not a crash
            res[name] = {"error": f"{type(e).__name__}: {e}"[:160]}
        b.free()  # the variant's trainer (optimizer state) is gone with measure's frame
        b.log(f"trainer {name}: " + ", ".join(f"{k} {v}" for k, v in res[name].items()
                                              if k not in ("grad", "times")))
    return [_row(b, name, res[name], res.get("today"), len(samples)) for name in names]


def _row(b, name: str, r: dict, base: dict | None, n: int) -> dict:
    what = f"GRPO update, {n} rows <= {b.a.step_new} new, {NAMES[name]}"
    if "error" in r:
        return dict(what=what, ours="failed", note=r["error"])
    tps = r["seq_tokens"] / r["s"]
    ok = base is not None and "error" not in base
    base_tps = base["seq_tokens"] / base["s"] if ok else None
    from .bench_common import interval

    note = (f"tok/s per repeat {interval([r['seq_tokens'] / t for t in r['times']], '{:,.0f}')}; "
            f"{r['passes']} passes of <= {r['rows']} rows, padding {1 - r['seq_tokens'] / r['padded_tokens']:.0%}"
            f"; first step {r['warm_s']:.1f}s; repeats bit-identical {'yes' if r['repeats_identical'] else 'NO'}")
    if b.cuda:
        note += f"; peak {r['peak_gib']:.1f} GiB"
    if ok and name != "today":
        ours, today = _flat(r["grad"]), _flat(base["grad"])
        rel = float((ours - today).norm() / today.norm().clamp(min=1e-30))
        note += f"; vs today: |dloss| {abs(r['loss'] - base['loss']):.1e}, |dgrad|/|grad| {rel:.1e}"
        b.log(f"trainer {name} vs today, |dgrad|/|grad| {grad_differences(r['grad'], base['grad'])}")
    shown = ok and name != "today"
    return dict(what=what, baseline=f"{base_tps:,.0f} tok/s" if shown else "", ours=f"{tps:,.0f} tok/s",
                ratio=f"{tps / base_tps:.2f}x" if shown else "",
                note=note, data={k: v for k, v in r.items() if k != "grad"})
