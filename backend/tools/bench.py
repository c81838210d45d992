"""`evotui bench`: each engine and trainer against its baseline, side by side.

Everything runs in this one process on one device, baseline first, and the
table at the end gives the ratio ours / baseline for each line:

- gen    tokens/s of the fast engine against plain transformers `generate`
         (GGUF quantizer removed, `.eval()`), same prompts, same lengths:
         EOS is ignored by both, so both decode batch x new tokens. A check
         row runs bare `model.generate` with the model's defaults (it stops
         at EOS) and the ratios use the faster of the two. Also greedy
         agreement with `generate` on the device.
- train  LoRA forward + backward + AdamW, tokens/s and peak memory: chunked
         log-probs with a micro-batch from backend/policy/memory.py (ours)
         against full-vocabulary log-softmax at the largest batch it fits;
         and, where Unsloth is installed (CUDA), its patched model against peft.
- step   one whole GRPO step of the real loop (math env, default harness; or
         `--step-domain code|swe`, swe at the levels of `--step-swe-levels`):
         time per phase, and the engine's own overhead (harness scoring,
         diagnosis, storing rows) as a share of the step; a code or swe step
         split into generation / tools+tests / training. On CUDA, the hf
         engine with the fixed micro-batch is the baseline
         (backend/tools/bench_step.py, with the GPU command lines).
- trl    (CPU) our GRPO step against TRL's GRPOTrainer: same model, group
         size, lengths and threads (`pip install 'evotui[bench]'`).
- dtype  (CPU) why the CPU default is fp32: `generate` with long prompts in
         fp32 against bf16 (not in the default sections: `--only dtype`).
- dist   each engine's next-token distribution against the policy's forward,
         teacher-forced (max |dlogp|, KL per position; `--only dist`). The
         `gen` section also times vLLM where it is installed. Both in
         backend/tools/bench_engines.py.
- determinism  LoRA forward + backward on a right-padded batch (the trainer's
         path, the masked attention kernel) under torch's deterministic algorithms
         (the default, `train.deterministic`) against without: tokens/s, and
         whether repeats give bit-identical gradients in each mode
         (backend/tools/bench_engines.py).
- ddp    a GRPO step of the real loop on 1 GPU and on `--gpus N` of this host,
         each GPU with the one-GPU batch: rollouts/s and the speed-up
         (`--only ddp`; backend/tools/bench_ddp.py).
- trainer  one GRPO update of a step's rollouts of mixed length: today's passes
         against each new trainer setting (passes by length, compiled body, and
         what determinism costs there), with loss, gradient and repeat checks
         (`--only trainer`; backend/tools/bench_trainer.py).
- card   six runs sharing one card (`evotui run --headless`, `model.gpu_share`),
         today's settings and then the new ones: rollouts per second of the
         card (`--only card`, within `--card-deadline`; backend/tools/bench_card.py).

The `step` section also runs the loop's step with each of `--step-variants`
(default: passes by length, then also without the padding mask) after today's,
in the same process.

    evotui bench --quick              # CPU-sized, a couple of minutes
    evotui bench --out /tmp/bench     # full sizes (a GPU); logs and rows.json there
    evotui bench -- --only gen --batch 512 --new 256   # options after `--`
    evotui bench -- --only trainer,step --skip-hf      # trainer settings against today's
    evotui bench -- --only step --step-domain swe --step-swe-levels 0,1 --tasks 32   # an SWE step
    evotui bench -- --only card --card-deadline 540    # six runs sharing the card, both settings

Timings are never asserted anywhere; this prints a table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

from .bench_common import Row, bench_harness, interval  # noqa: F401 (Row, interval: for callers and tests)
from .bench_trainer import VARIANTS as TRAINER_VARIANTS
from .bench_step import STEP_DOMAINS, bench_step, one_step, step_variants  # noqa: F401 (step_variants: tests)

SECTIONS = ("gen", "train", "trainer", "determinism", "step", "trl", "dtype", "harness", "dist", "ddp", "card")
DEFAULT_SECTIONS = ("gen", "train", "determinism", "step", "trl", "harness")
TRAINER_PROMPTS = {"math": "80,130", "code": "105,160", "swe": "270,1100"}
"""`--trainer-prompt`'s default for each `--step-domain`: MIN,MAX prompt tokens of its rollouts (code:
generated tasks at level 0; swe: levels 0 and 1, ~270-660 and ~760-1100 tokens; the default tokenizer)."""


class Bench:
    def __init__(self, args):
        self.a = args
        self.rows: list[Row] = []
        self.out = Path(args.out) if args.out else None
        self.log_file = open(self.out / "bench.log", "a") if self.out else None
        self.device = torch.device(args.device if args.device != "auto" else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.device.type == "cuda"

    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        if self.log_file:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.log(f"{row.section:5} {row.what}: baseline {row.baseline or '-'} | ours {row.ours or '-'} "
                 f"| {row.ratio or '-'} {row.note}")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def timed(self, fn):
        self.sync()
        t = time.perf_counter()
        out = fn()
        self.sync()
        return time.perf_counter() - t, out

    def model_config(self, **kw):
        from backend.config import ModelConfig

        return ModelConfig(name=self.a.model, gguf_file=self.a.gguf, device=str(self.device),
                           threads=self.a.threads, **kw)

    def free(self) -> None:
        import gc

        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)


# ---------------------------------------------------------------- models


def load(b: Bench, lora: bool):
    """(model, tokenizer, device, dtype): the configured model, or random weights of its shape.

    `--random-init` needs only config.json and the tokenizer in the --model
    folder: speed does not depend on the weights (EOS is ignored in `gen`).
    """
    if not b.a.random_init:
        if lora:
            from backend.policy.model import load_policy

            lm = load_policy(b.model_config())
            return lm.model, lm.tokenizer, lm.device, lm.dtype
        from backend.policy.model import load_base

        model, tok, dev, dtype = load_base(b.model_config())
        return model.eval(), tok, dev, dtype
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from backend.policy.model import pick_dtype

    dtype = pick_dtype("auto", b.device)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(b.a.model)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(b.device).eval()
    tok = AutoTokenizer.from_pretrained(b.a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if lora:
        from peft import LoraConfig, get_peft_model

        mc = b.model_config()
        model = get_peft_model(model, LoraConfig(r=mc.lora_r, lora_alpha=mc.lora_alpha, task_type="CAUSAL_LM",
                                                  target_modules=list(mc.target_modules)))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
        model.eval()
    return model, tok, b.device, dtype


# ---------------------------------------------------------------- prompts


def math_prompts(tok, n: int, seed: int = 0) -> list[list[int]]:
    """Chat prompts as the default math harness writes them (no reasoning-gym needed)."""
    from backend.envs.base import Task
    from backend.harness.loader import load_default
    from backend.policy.model import chat_ids

    h = load_default("math")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        q = f"What is {a} + {b} * {c}? Give the answer as a number."
        out.append(chat_ids(tok, h.messages(Task(str(i), "math", q))))
    return out


# ---------------------------------------------------------------- gen


def bench_gen(b: Bench) -> None:
    from backend.policy.fastgen import FastGenerator
    from backend.policy.generate import HFGenerator

    B, new = b.a.batch, b.a.new
    model, tok, dev, dtype = load(b, lora=False)
    prompts = math_prompts(tok, B)
    width = max(len(p) for p in prompts)
    b.log(f"gen: batch {B}, prompt {width} tokens, {new} new, {dtype}, {dev}")
    if b.a.skip_hf:  # comparisons between the engine's own variants: no baseline ("nan" in its columns)
        base_tps, t_hf = float("nan"), float("nan")
    else:
        HFGenerator(model, tok, dev).generate(prompts[:8], 8, 1.0)  # warm-up
        hf = HFGenerator(model, tok, dev, batch_size=B, min_new_tokens=new)  # min_new_tokens: no early stop
        t_hf, _ = b.timed(lambda: hf.generate(prompts, new, 1.0))
        base_tps = plain_generate_check(b, model, tok, prompts, new, B * new / t_hf)
    variants = [("fast, torch kernels", {"kernels": "torch"})]
    if b.cuda:  # triton last: a kernel fault would poison the CUDA context for what follows
        variants += [("fast, torch kernels + compiled sampling", {"kernels": "torch", "compile": True}),
                     ("fast, triton kernels + compiled torch sampling",
                      {"kernels": "triton", "sampler": "torch", "compile": True}),
                     ("fast, triton kernels + triton sampler (default)", {"kernels": "triton"}),
                     ("fast, triton, int8 KV cache (model.kv_int8)", {"kernels": "triton", "kv_int8": True}),
                     ("fast, triton, attention tile 128 x 4 warps", {"kernels": "triton", "attn_tile": (128, 4)}),
                     ("fast, triton, attention tile 32 x 2 warps", {"kernels": "triton", "attn_tile": (32, 2)})]
    best = None
    for name, kw in variants:
        try:
            eng = FastGenerator(model, tok, dev, max_batch=B, **kw)
            run = partial(eng.generate, prompts, new, 1.0, stop_at_eos=False)
            t_warm, _ = b.timed(run)  # captures graphs
            times = [b.timed(run)[0] for _ in range(b.a.reps)]
            t = sorted(times)[len(times) // 2]
            tps = B * new / t
            b.add(Row("gen", f"tok/s, {name}, batch {B} x {new} new", f"{base_tps:,.0f}", f"{tps:,.0f}",
                      f"{tps / base_tps:.1f}x", f"first call {t_warm:.1f}s" + (" (graph capture)" if b.cuda else "")
                      + (f"; {eng.fallback}: ran the torch kernels" if eng.fallback else ""),
                      {"baseline_s": t_hf, "ours_s": times, "warm_s": t_warm}))
            if best is None or tps > best[1]:
                best = (eng, tps, name)
        except Exception as e:  # a variant that fails is a row, not a crash
            b.add(Row("gen", f"tok/s, {name}", f"{base_tps:,.0f}", "failed", "", f"{type(e).__name__}: {e}"[:120]))
        b.free()
    bench_vllm(b, prompts, new, base_tps)
    b.free()
    if best is not None:
        greedy_agreement(b, best[0], HFGenerator(model, tok, dev, batch_size=B), prompts[:16 if b.cuda else 4],
                         best[2])
        if b.a.profile and b.cuda:
            profile_step(b, best[0], prompts, new)


def bench_vllm(b: Bench, prompts, new: int, base_tps: float) -> None:
    """vLLM's rows in `gen` (backend/tools/bench_engines.py), where it is installed."""
    from backend.policy.vllm_generator import vllm_status

    from .bench_engines import vllm_gen_rows

    why = vllm_status(b.device)
    if why:
        return b.add(Row("gen", "tok/s, vLLM", f"{base_tps:,.0f}", "not run", "", why))
    model, tok, dev, _ = load(b, lora=True)
    for row in vllm_gen_rows(b, model, tok, dev, prompts, new, base_tps):
        b.add(Row("gen", **row))


def plain_generate_check(b: Bench, model, tok, prompts, new: int, hf_tps: float) -> float:
    """The baseline as ../shared/GPU.md measured it: bare `model.generate`, the model's own
    generation defaults (top-k 50 and so on), no forced length. Rows may stop early, so
    tok/s is given both per requested token (B x new / t) and per token actually made.
    Returns the faster baseline (per requested token) for the ratios that follow."""
    from backend.policy.generate import left_pad

    pad = tok.pad_token_id
    ids, att = left_pad(prompts, pad)
    width = ids.shape[1]
    ids, att = ids.to(b.device), att.to(b.device)
    with torch.no_grad():
        t, out = b.timed(lambda: model.generate(input_ids=ids, attention_mask=att, do_sample=True,
                                                max_new_tokens=new, pad_token_id=pad))
    made = int((out[:, width:] != pad).sum())
    nominal = len(prompts) * new / t
    b.add(Row("gen", f"baseline check: bare model.generate, model defaults, batch {len(prompts)}",
              f"{hf_tps:,.0f}", f"{nominal:,.0f}", f"{nominal / hf_tps:.2f}x",
              f"{made:,} of {len(prompts) * new:,} tokens made ({made / t:,.0f} real tok/s); "
              f"the ratios below use the faster of the two baselines"))
    return max(hf_tps, nominal)


def profile_step(b: Bench, eng, prompts, new: int) -> None:
    """Kernel times of eight decode steps, the prefill taken out, against the step's wall time
    under graphs (backend/tools/bench_decode_profile.py): the first eight of `new`, then the last
    eight (attention reads a longer cache there)."""
    from .bench_decode_profile import profile_decode

    for after in sorted({0, max(0, new - 9)}):
        b.log(f"profile, batch {len(prompts)}, 8 decode steps after {after}:\n"
              + profile_decode(eng, prompts, b.timed, after=after))


def greedy_agreement(b: Bench, eng, hf, prompts, name: str) -> None:
    n = 48 if b.cuda else 16
    ref = hf.generate(prompts, n, 0.0)
    got = eng.generate(prompts, n, 0.0)
    same = sum(r.ids == g.ids for r, g in zip(ref, got))
    prefix = []
    for r, g in zip(ref, got):
        k = next((i for i, (x, y) in enumerate(zip(r.ids, g.ids)) if x != y), min(len(r.ids), len(g.ids)))
        prefix.append(k / max(len(r.ids), 1))
    b.add(Row("gen", f"greedy = generate, {len(prompts)} prompts x {n}", "", f"{same}/{len(prompts)} identical",
              "", f"{name}; mean share before first difference {sum(prefix) / len(prefix):.2f}"))


# ---------------------------------------------------------------- train


def train_pass(model, opt, ids, att, mask, adv, micro: int, kind: str, chunk: int) -> None:
    """One optimizer step over all rows in micro-batches: policy-gradient loss on completion tokens.

    kind: full (log-softmax over the whole vocabulary), chunked (grpo.checkpointed_token_logprobs:
    checkpointed chunks), fused (grpo.token_logprobs, the trainer's path: chunks, gradient in forward).
    """
    from backend.policy.grpo import checkpointed_token_logprobs, token_logprobs

    model.train()
    opt.zero_grad(set_to_none=True)
    n_tok = mask.sum()
    for i in range(0, ids.shape[0], micro):
        x, a, m, v = ids[i:i + micro], att[i:i + micro], mask[i:i + micro], adv[i:i + micro]
        if kind == "full":
            logits = model(input_ids=x, attention_mask=a).logits[:, :-1].float()  # (b, T-1, V): all at once
            lp = torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None])[..., 0]
        else:
            lp, _ = (token_logprobs if kind == "fused" else checkpointed_token_logprobs)(model, x, a, chunk)
        loss = -(torch.exp(lp - lp.detach()) * v[:, None] * m).sum() / n_tok
        loss.backward()
    opt.step()
    model.eval()


def bench_train(b: Bench) -> None:
    from backend.policy import memory
    from backend.policy.fastgen import Spec, unwrap

    model = load(b, lora=True)[0]
    spec = Spec.of(unwrap(model).config)
    N, T, P = b.a.train_batch, b.a.train_len, b.a.train_len // 3
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, spec.vocab, (N, T), generator=g).to(b.device)
    att = torch.ones_like(ids)
    mask = torch.zeros(N, T - 1, device=b.device)
    mask[:, P - 1:] = 1
    adv = (torch.randint(0, 2, (N,), generator=g).float() * 2 - 1).to(b.device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    chunk = 64

    def run(n, micro, kind):
        b.free()
        go = lambda: train_pass(model, opt, ids[:n], att[:n], mask[:n], adv[:n], micro, kind, chunk)  # noqa: E731
        go()  # warm-up at the same shapes: allocator growth, cuBLAS heuristics
        if b.cuda:
            torch.cuda.reset_peak_memory_stats(b.device)
        t, _ = b.timed(go)
        peak = torch.cuda.max_memory_allocated(b.device) if b.cuda else 0
        return n * T / t, peak

    def attempt(n, micro, kind):
        try:
            return run(n, micro, kind)
        except torch.OutOfMemoryError:
            pass
        opt.zero_grad(set_to_none=True)  # outside the except: its traceback held the big tensors
        b.free()
        return None

    small = b.a.full_vocab_batch
    base = attempt(small, small, "full")
    big_full = attempt(N, N, "full")
    if b.cuda:
        free = memory.free_bytes(b.device)
        micro = memory.balance(N, memory.pick_micro_batch(spec, T, free, chunk))
    else:
        free, micro = 0, b.a.micro
    chunked_small = attempt(small, small, "chunked")
    ours_small = attempt(small, small, "fused")
    ours = attempt(N, micro, "fused")
    gib = 1 << 30

    def fmt(r):
        return "OOM" if r is None else f"{r[0]:,.0f} tok/s" + (f", {r[1] / gib:.1f} GiB" if b.cuda else "")

    est = memory.train_bytes_per_sequence(spec, T, chunk) * min(micro, N)
    b.add(Row("train", f"LoRA fwd+bwd, batch {small} x {T}", fmt(base), fmt(ours_small),
              _ratio(ours_small, base), f"full-vocab log-softmax vs fused chunks, one micro-batch; "
              f"checkpointed chunks: {fmt(chunked_small)}"))
    b.add(Row("train", f"LoRA fwd+bwd, batch {N} x {T}", fmt(big_full), fmt(ours),
              _ratio(ours, base) + (" vs full @" + str(small) if ours and base else ""),
              f"ours: fused chunks, micro-batch {micro} from memory.py (est. peak {est / gib:.1f} GiB of "
              f"{free / gib:.0f} free)" if b.cuda else f"ours: fused chunks, micro-batch {micro}"))
    bench_unsloth(b, ids, att, mask, adv, micro, chunk, ours)


def bench_unsloth(b: Bench, ids, att, mask, adv, micro: int, chunk: int, peft_row) -> None:
    """The same LoRA training pass on Unsloth's patched model, against peft (ours above)."""
    from backend.policy.load import load_unsloth_policy, unsloth_status

    N, T = ids.shape
    why = unsloth_status(str(b.device))
    if why:
        return b.add(Row("train", f"Unsloth LoRA fwd+bwd, batch {N} x {T}", note=f"skipped: {why}"))
    b.free()
    try:
        lm = load_unsloth_policy(b.model_config(), max_seq_length=T)
    except Exception as e:
        return b.add(Row("train", f"Unsloth LoRA fwd+bwd, batch {N} x {T}", note=f"failed to load: "
                         f"{type(e).__name__}: {e}"[:200]))
    opt = torch.optim.AdamW([p for p in lm.model.parameters() if p.requires_grad], lr=1e-6)
    go = lambda: train_pass(lm.model, opt, ids, att, mask, adv, micro, "fused", chunk)  # noqa: E731
    try:
        go()
        if b.cuda:
            torch.cuda.reset_peak_memory_stats(b.device)
        t, _ = b.timed(go)
    except Exception as e:
        return b.add(Row("train", f"Unsloth LoRA fwd+bwd, batch {N} x {T}", note=f"failed: "
                         f"{type(e).__name__}: {e}"[:200]))
    peak = torch.cuda.max_memory_allocated(b.device) if b.cuda else 0
    tps = N * T / t
    base = f"{peft_row[0]:,.0f} tok/s" if peft_row else "-"
    b.add(Row("train", f"Unsloth LoRA fwd+bwd, batch {N} x {T}", base, f"{tps:,.0f} tok/s, {peak / (1 << 30):.1f} GiB",
              f"{tps / peft_row[0]:.2f}x" if peft_row else "", f"peft (ours above) vs Unsloth-patched model, same "
              f"fused chunks and micro-batch {micro}"))


def _ratio(a, c) -> str:
    return f"{a[0] / c[0]:.2f}x" if a and c else ""


# ---------------------------------------------------------------- dtype


def bench_dtype(b: Bench, n_prompts: int = 4, prompt_len: int = 300, new: int = 16) -> None:
    """Plain `generate` on long prompts in fp32 (baseline) and bf16, same weights and threads."""
    if b.cuda:
        return b.add(Row("dtype", "fp32 vs bf16 generate", note="CPU only: on CUDA bf16 is the default"))
    from backend.policy.generate import HFGenerator

    model, tok, dev, _ = load(b, lora=False)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 20000, (prompt_len,), generator=g).tolist() for _ in range(n_prompts)]
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        eng = HFGenerator(model, tok, dev, batch_size=n_prompts, min_new_tokens=new)
        eng.generate(prompts[:1], 2, 1.0)  # warm-up
        t, _ = b.timed(partial(eng.generate, prompts, new, 1.0))
        rates[dtype] = n_prompts * new / t
    f32, bf16 = rates[torch.float32], rates[torch.bfloat16]
    b.add(Row("dtype", f"generate tok/s, {n_prompts} prompts x {prompt_len} tokens, {new} new", f"{f32:.1f} (fp32)",
              f"{bf16:.1f} (bf16)", f"{bf16 / f32:.2f}x", "bf16 as the CPU default would be this much of fp32"))


# ---------------------------------------------------------------- trl


def bench_trl(b: Bench, ours: dict | None) -> None:
    try:
        import trl  # noqa: F401
        from datasets import Dataset
    except ImportError:
        b.add(Row("trl", "GRPO step vs TRL", note="skipped: pip install 'evotui[bench]' (trl)"))
        return
    if b.a.random_init:
        return b.add(Row("trl", "GRPO step vs TRL", note="skipped with --random-init"))
    if ours is None:
        ours = one_step(b, "auto", b.a.micro, True, steps=b.a.steps, tag="-ours")
    t, n_tok = trl_step(b, Dataset)
    b.add(Row("trl", f"GRPO step, {b.a.tasks} x {b.a.group} rollouts, <= {b.a.step_new} new",
              f"{t:.2f} s", f"{ours['total_ms'] / 1000:.2f} s", f"{t / (ours['total_ms'] / 1000):.2f}x faster",
              f"TRL {trl.__version__} GRPOTrainer ({n_tok} tokens) vs our loop step ({ours['tokens']} tokens), "
              f"{torch.get_num_threads()} threads, {b.device}"))


def trl_step(b: Bench, Dataset) -> tuple[float, int]:
    """Seconds of TRL's fastest GRPO step after the first (warm-up), on the same model and sizes."""
    import logging

    from peft import LoraConfig
    from transformers import TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from backend.config import RunConfig
    from backend.envs import make_env
    from backend.harness.loader import load_default
    from backend.policy.model import load_base

    hf_logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    mc = b.model_config()
    model, tok, _, _ = load_base(mc)
    h = load_default("math")
    env = make_env(RunConfig())
    tasks = env.sample_tasks(b.a.tasks * 4, random.Random(0), h.curriculum)
    ds = Dataset.from_list([{"prompt": h.messages(t)} for t in tasks])
    times, toks = [], []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

    def reward(completions, **kw):
        toks.append(sum(len(c) for c in kw.get("completion_ids") or []))
        return [0.1 if "<answer>" in (c[0]["content"] if isinstance(c, list) else c) else 0.0 for c in completions]

    out = tempfile.mkdtemp(prefix="evotui-trl-")
    args = GRPOConfig(output_dir=out, per_device_train_batch_size=b.a.tasks * b.a.group,
                      num_generations=b.a.group, max_completion_length=b.a.step_new, max_steps=b.a.steps,
                      learning_rate=1e-6, temperature=1.0, top_p=1.0, top_k=0, beta=0.0, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=not b.cuda, bf16=False, seed=0,
                      dataloader_num_workers=0, disable_tqdm=True)
    lora = LoraConfig(r=mc.lora_r, lora_alpha=mc.lora_alpha, target_modules=list(mc.target_modules),
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=lora, callbacks=[Clock()])
    if mc.threads:
        torch.set_num_threads(mc.threads)
    trainer.train()
    k = min(range(1, len(times)), key=times.__getitem__) if len(times) > 1 else 0
    return times[k], toks[k] if k < len(toks) else 0


# ---------------------------------------------------------------- main


def table(rows: list[Row]) -> str:
    head = ("section", "measure", "baseline", "ours", "ours/base", "note")
    cells = [head] + [(r.section, r.what, r.baseline, r.ours, r.ratio, r.note) for r in rows]
    w = [max(len(c[i]) for c in cells) for i in range(5)]
    lines = []
    for k, c in enumerate(cells):
        lines.append("  ".join(c[i].ljust(w[i]) for i in range(5)) + "  " + c[5])
        if k == 0:
            lines.append("  ".join("-" * w[i] for i in range(5)) + "  " + "-" * 4)
    return "\n".join(lines)


def parse(argv: list[str], quick: bool):
    p = argparse.ArgumentParser(prog="evotui bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(DEFAULT_SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--out", default=os.environ.get("EVOTUI_BENCH_OUT", ""), help="folder for bench.log, rows.json")
    p.add_argument("--device", default="auto")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--gguf", default="", help="GGUF file name inside --model (a folder)")
    p.add_argument("--random-init", action="store_true", help="random weights of --model's shape (a folder "
                   "with config.json and a tokenizer): speed only")
    # One thread under --quick: on a shared 2-core machine two threads per process oversubscribe
    # the cores and OpenMP's spin-waits slowed both sides 10-30x (measured here).
    p.add_argument("--threads", type=int, default=1 if quick else 0)
    p.add_argument("--reps", type=int, default=1 if quick else 3)
    p.add_argument("--profile", action="store_true",
                   help="gen: kernel times of decode steps (prefill taken out) against their wall time; "
                   "trainer: of one step per variant")
    cuda = torch.cuda.is_available() and not quick
    p.add_argument("--batch", type=int, default=512 if cuda else 8, help="gen: prompts decoded together")
    p.add_argument("--new", type=int, default=256 if cuda else 32, help="gen: new tokens per prompt")
    p.add_argument("--train-batch", type=int, default=256 if cuda else 8)
    p.add_argument("--train-len", type=int, default=384 if cuda else 96)
    p.add_argument("--full-vocab-batch", type=int, default=64 if cuda else 4)
    p.add_argument("--micro", type=int, default=4, help="CPU micro-batch (CUDA: from memory.py)")
    p.add_argument("--tasks", type=int, default=64 if cuda else 2, help="step: tasks per step")
    p.add_argument("--group", type=int, default=8 if cuda else 4, help="step: group size")
    p.add_argument("--step-new", type=int, default=128 if cuda else 32, help="step: max new tokens (swe: a turn's)")
    p.add_argument("--trainer-prompt", default="",
                   help="trainer: MIN,MAX prompt tokens of its rollouts (default: --step-domain's, "
                   f"{'; '.join(f'{k} {v}' for k, v in TRAINER_PROMPTS.items())}; SWE level 0 alone: 300,650)")
    p.add_argument("--step-domain", default="math", choices=STEP_DOMAINS,
                   help="step: the domain of the loop's steps, with its default harness (code, swe: the row "
                   "splits generation / tools+tests / training)")
    p.add_argument("--step-swe-levels", default="0,1", help="step, --step-domain swe: the task levels drawn "
                   "(swe.levels; the row's measure names them)")
    p.add_argument("--steps", type=int, default=2 if cuda else 3, help="step, trl: steps run (fastest after the first)")
    p.add_argument("--step-variants", default="buckets:train.length_buckets=true;"
                   "causal:train.length_buckets=true,train.causal_only=true",
                   help='step: more steps against today\'s, "name:key=value,...;name2:..." (empty: none)')
    p.add_argument("--skip-hf", action="store_true", help="step, gen: no plain-generate baseline (CUDA: step ~100 s, "
                   "gen ~20 s)")
    p.add_argument("--trainer-variants", default="buckets,causal,nondet,compiled,prefix",
                   help=f"trainer: variants against today's, of {', '.join(TRAINER_VARIANTS)}")
    p.add_argument("--card-runs", type=int, default=6, help="card: runs sharing the card")
    p.add_argument("--card-share", type=float, default=0.15, help="card: model.gpu_share of each run")
    p.add_argument("--card-deadline", type=float, default=540.0,
                   help="card: seconds for both settings together (start, measure, stop)")
    p.add_argument("--card-mps", action="store_true",
                   help="card: the new setting's runs share the card through a private CUDA MPS daemon")
    p.add_argument("--card-new", default="train.length_buckets=true,train.causal_only=true",
                   help="card: the new settings, comma-separated key=value")
    p.add_argument("--gpus", type=int, default=0, help="ddp: ranks against one (default: every visible GPU; "
                   "2 on the CPU)")
    a = p.parse_args(argv)
    a.trainer_prompt = a.trainer_prompt or TRAINER_PROMPTS[a.step_domain]
    if quick:
        a.device = "cpu" if a.device == "auto" else a.device
    return a


def main(argv: list[str] | None = None, quick: bool = False) -> int:
    """Run the chosen sections and print the table; returns an exit code."""
    argv = list(argv or [])
    if argv[:1] == ["--"]:  # `evotui bench --quick -- --only gen`: the CLI hands over what follows `--`
        argv = argv[1:]
    args = parse(argv, quick)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    b = Bench(args)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in only if s not in SECTIONS]
    if bad:
        print(f"evotui bench: unknown section {', '.join(bad)} (choose from {', '.join(SECTIONS)})", file=sys.stderr)
        return 2
    unknown = set(args.trainer_variants.replace(" ", "").split(",")) - {"", *TRAINER_VARIANTS}
    if unknown:
        print(f"evotui bench: unknown trainer variant {', '.join(sorted(unknown))} "
              f"(choose from {', '.join(TRAINER_VARIANTS)})", file=sys.stderr)
        return 2
    if b.cuda and "train" in only and importlib.util.find_spec("unsloth") is not None:
        try:  # before transformers, so Unsloth can patch everything it wants to
            import unsloth  # noqa: F401
        except Exception as e:
            b.log(f"import unsloth failed: {type(e).__name__}: {e}")
    dev = torch.cuda.get_device_name(b.device) if b.cuda else f"CPU, {torch.get_num_threads()} threads"
    b.log(f"device: {dev}; torch {torch.__version__}")
    ours_step = None
    for sec in only:
        t0 = time.perf_counter()
        try:
            if sec == "gen":
                bench_gen(b)
            elif sec == "train":
                bench_train(b)
            elif sec == "trainer":
                from .bench_trainer import trainer_rows

                model, tok, _, _ = load(b, lora=True)
                names = [n.strip() for n in b.a.trainer_variants.split(",") if n.strip()]
                for row in trainer_rows(b, model, tok, names):
                    b.add(Row("trainer", **row))
            elif sec == "card":
                from .bench_card import card_rows

                for row in card_rows(b):
                    b.add(Row("card", **row))
            elif sec == "step":
                step = bench_step(b)
                ours_step = step if args.step_domain == "math" else None  # trl and harness compare math
            elif sec == "trl" and b.cuda:
                b.add(Row("trl", "GRPO step vs TRL", note="measured on the CPU only (evotui bench --quick)"))
            elif sec == "trl":
                bench_trl(b, ours_step)
            elif sec == "dtype":
                bench_dtype(b)
            elif sec == "determinism":
                from .bench_engines import determinism_row

                b.add(Row("determinism", **determinism_row(b, load(b, lora=True)[0])))
            elif sec == "dist":
                from .bench_engines import dist_rows

                model, tok, dev, dtype = load(b, lora=True)
                for row in dist_rows(b, model, tok, dev, dtype, math_prompts(tok, 4)):
                    b.add(Row("dist", **row))
            elif sec == "ddp":
                from .bench_ddp import ddp_rows

                for row in ddp_rows(b, bench_harness()):
                    b.add(Row("ddp", **row))
            elif sec == "harness":
                from .bench_harness import boundary_rows

                sizes = [("GPU step, 64 x 8", 512, 8), ("CPU default, 4 x 4", 16, 4)]
                step_s = ours_step["total_ms"] / 1000 if isinstance(ours_step, dict) else None
                for row in boundary_rows(sizes, step_s, b.a.reps):
                    b.add(Row("harness", **row))
        except Exception as e:  # one section failing still prints the others
            import traceback

            b.log(traceback.format_exc())
            b.add(Row(sec, "section failed", note=f"{type(e).__name__}: {e}"[:160]))
        b.free()  # the section's models and caches are gone with its frame
        b.log(f"section {sec} took {time.perf_counter() - t0:.0f}s")
    text = table(b.rows)
    print(f"\nevotui bench on {dev} (torch {torch.__version__})\n{text}", flush=True)
    if b.out:
        (b.out / "rows.json").write_text(json.dumps([r.__dict__ for r in b.rows], indent=1, default=str))
        (b.out / "table.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main([x for x in sys.argv[1:] if x != "--quick"], quick="--quick" in sys.argv))
