"""Unsloth's fast LoRA path, when it is installed and a CUDA GPU is present.

Unsloth patches the Llama/Qwen/Mistral modules with fused Triton kernels
(RoPE, RMSNorm, SwiGLU, cross-entropy) and its own gradient checkpointing.
It is optional (`pip install unsloth`, CUDA only); everything here imports it
lazily, and `load_fast_policy` falls back to plain peft (`load_policy`) with
the reason when it cannot be used. The trainer does not change: an Unsloth
model is a peft model, so chunked log-probs and GRPO run on it as on any.
(The fused chunked log-probs that used to live here are now grpo.token_logprobs.)

Unsloth wants to be imported before transformers to patch everything; in
evotui transformers is already loaded by then, so only the patches Unsloth
can still apply take effect (it warns about this itself).
"""

from __future__ import annotations

import importlib.util
import os

import torch

from backend.config import DEFAULT_MODEL, ModelConfig
from backend.policy import determinism, memory
from backend.policy.model import LoadedModel, load_policy, pick_device


def unsloth_status(device: str = "auto") -> str | None:
    """None if Unsloth can train here, else why not (one line)."""
    if importlib.util.find_spec("unsloth") is None:
        return "unsloth is not installed (pip install unsloth; CUDA only)"
    if not torch.cuda.is_available() or pick_device(device).type != "cuda":
        return "unsloth needs a CUDA GPU"
    return None


def _hf_name(cfg: ModelConfig) -> str:
    """A name Unsloth can load: the dequantized cache folder for GGUF models (made on first use)."""
    if cfg.name != DEFAULT_MODEL and not cfg.gguf_file:
        return cfg.name
    from backend.policy.model import _gguf_cache_dir, embedded_gguf, load_base, pick_dtype

    folder, gguf = embedded_gguf() if cfg.name == DEFAULT_MODEL else (os.path.expanduser(cfg.name), cfg.gguf_file)
    cache = _gguf_cache_dir(folder, gguf, pick_dtype(cfg.dtype, pick_device(cfg.device)))
    if cache is None:
        raise ValueError(f"no GGUF file {gguf} in {folder}")
    if not (cache / "config.json").exists():
        load_base(cfg)  # dequantizes once and writes the cache folder
    return str(cache)


def load_unsloth_policy(cfg: ModelConfig, max_seq_length: int = 4096) -> LoadedModel:
    """Base model and a fresh LoRA adapter through Unsloth (raises if Unsloth is unusable)."""
    why = unsloth_status(cfg.device)
    if why:
        raise RuntimeError(why)
    from unsloth import FastLanguageModel

    dtype = None if cfg.dtype == "auto" else {"bf16": torch.bfloat16, "fp16": torch.float16,
                                             "fp32": torch.float32}[cfg.dtype]
    model, tok = FastLanguageModel.from_pretrained(model_name=_hf_name(cfg), max_seq_length=max_seq_length,
                                                   dtype=dtype, load_in_4bit=False)
    model = FastLanguageModel.get_peft_model(model, r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                             lora_dropout=cfg.lora_dropout,
                                             target_modules=list(cfg.target_modules),
                                             use_gradient_checkpointing="unsloth")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    device = next(model.parameters()).device
    return LoadedModel(model, tok, device, next(model.parameters()).dtype, cfg.name, trainer="unsloth")


def load_fast_policy(cfg: ModelConfig, adapter_dir=None, seed: int | None = None) -> LoadedModel:
    """Unsloth when usable for a fresh adapter, else peft; `.trainer` says which, and why not Unsloth.

    A fresh adapter's random init (LoRA A) is drawn after `torch.manual_seed(seed)`: without it,
    two runs of one seed started from different initial adapters (torch seeds each process
    at random). EVOTUI_NO_UNSLOTH=1 forces peft. First, before CUDA runs a kernel, the process's
    settings for reproducible arithmetic (backend/policy/determinism.py) and, on CUDA, the
    run's `model.gpu_share` of the card (backend/policy/memory.py).
    """
    determinism.configure()
    memory.claim_share(pick_device(cfg.device), cfg.gpu_share)
    if seed is not None:
        torch.manual_seed(seed)
    why = "EVOTUI_NO_UNSLOTH is set" if os.environ.get("EVOTUI_NO_UNSLOTH") else unsloth_status(cfg.device)
    if why is None and adapter_dir:
        why = "resuming from a saved adapter loads through peft"
    if why is None:
        try:
            return load_unsloth_policy(cfg)
        except Exception as e:  # an optional fast path that fails must not stop the run
            why = f"unsloth failed: {type(e).__name__}: {e}"
    lm = load_policy(cfg, adapter_dir)
    lm.trainer = f"peft ({why})"
    return lm
