"""`evotui doctor`: which fast paths are active here, and why not the others.

    $ evotui doctor
    device      cuda: NVIDIA H200 (bf16)
    generation  fast   <- auto picks this
                vllm   no: vllm is not installed (pip install 'evotui[gpu]')
    ...

Reads the model's config only (no weights). Each line is printed as soon as its check is done:
the first needs torch imported, which takes a while on a cold or busy machine.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator


def _model_config(cfg):
    """The transformers config of the configured model, without loading weights."""
    from transformers import AutoConfig

    from backend.config import DEFAULT_MODEL
    from backend.policy.model import _gguf_cache_dir, embedded_gguf, pick_device, pick_dtype

    name, gguf = cfg.name, cfg.gguf_file or None
    if name == DEFAULT_MODEL:
        name, gguf = embedded_gguf()
    if gguf:
        cache = _gguf_cache_dir(name, gguf, pick_dtype(cfg.dtype, pick_device(cfg.device)))
        if cache is not None and (cache / "config.json").exists():
            return AutoConfig.from_pretrained(str(cache))
        return AutoConfig.from_pretrained(name, gguf_file=gguf)
    return AutoConfig.from_pretrained(name)


def report(cfg=None) -> list[tuple[str, str]]:
    """(topic, line) pairs: what `doctor` prints."""
    return list(checks(cfg))


def checks(cfg=None) -> Iterator[tuple[str, str]]:
    """(topic, line) pairs, each yielded as soon as its check is done."""
    import torch

    from backend.config import RunConfig
    from backend.policy import fastattn
    from backend.policy.load import unsloth_status
    from backend.policy.fastgen import why_unsupported
    from backend.policy.generate import auto_choice, generator_status
    from backend.policy.model import pick_device
    from backend.policy.vllm_generator import vllm_build, vllm_status

    cfg = cfg or RunConfig().model
    dev = pick_device(cfg.device)
    if dev.type == "cuda":
        bf16 = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        yield "device", f"cuda: {torch.cuda.get_device_name(dev)} ({bf16}), torch {torch.__version__}"
    else:
        why = "torch has no CUDA build" if torch.version.cuda is None else "no CUDA GPU visible"
        yield "device", f"cpu ({why}), torch {torch.__version__}, {torch.get_num_threads()} threads"
    try:
        mcfg = _model_config(cfg)
        fast_why = why_unsupported(mcfg)
        arch = getattr(mcfg, "model_type", "?")
    except Exception as e:  # a model we cannot read is a line, not a crash
        fast_why, arch = f"cannot read the model config: {type(e).__name__}: {str(e)[:80]}", "?"
    yield "model", f"{cfg.name} ({arch})"
    cuda = dev.type == "cuda"
    st = generator_status(mcfg, dev) if arch != "?" else {"vllm": vllm_status(dev), "fast": fast_why, "hf": None}
    order, why_auto = auto_choice(st, dev)
    pick = order[0] if cfg.engine == "auto" else cfg.engine
    for name in ("vllm", "fast", "hf"):
        why = st[name]
        mark = "  <- model.engine picks this" if name == pick else ""
        yield "generation", f"{name:6} {'yes' if why is None else 'no: ' + why}{mark}"
    if cfg.engine == "auto":
        yield "generation", f"auto -> {why_auto}"
    build = vllm_build()
    if build and st["vllm"] is None:
        sleep = "sleeps during training" if cuda else "no sleep mode in the CPU build (its KV cache stays allocated)"
        yield "generation", f"vllm: {build[0]} {build[1]}, a LoRA adapter per policy version, {sleep}"
    if cuda and st["fast"] is None:
        kern = "triton kernels" if fastattn.available() else "torch kernels (triton is not installed)"
        yield "generation", f"fast engine uses {kern}, CUDA graphs per batch size"
    uns = unsloth_status(cfg.device)
    yield "training", f"unsloth {'yes' if uns is None else 'no: ' + uns}"
    lora = "unsloth LoRA (load_fast_policy)" if uns is None else "peft LoRA"
    yield "training", f"{lora}, chunked token log-probs (never batch x length x vocab at once)"
    if cuda:
        from backend.policy import memory
        from backend.policy.shape import Spec

        try:
            spec = Spec.of(mcfg)
            mb = memory.pick_micro_batch(spec, 384, memory.free_bytes(dev))
            yield "training", f"micro-batch from free memory: {mb} sequences of 384 tokens now"
        except Exception:
            pass
    else:
        yield "training", "micro-batch: train.micro_batch (the memory estimate is for CUDA)"
    yield "bench", "trl " + ("yes" if importlib.util.find_spec("trl") else
                             "no: pip install 'evotui[bench]' for the TRL comparison")


def main() -> int:
    """Print each check as it is done; a check that fails ends the list with one line and exit 1."""
    print("checking this machine (torch, the model's config, each engine) ...", flush=True)
    last = None
    try:
        for topic, line in checks():
            print(f"{topic if topic != last else '':11} {line}", flush=True)
            last = topic
    except Exception as e:
        print(f"evotui doctor: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
