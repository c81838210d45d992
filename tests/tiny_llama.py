"""A tiny random Llama saved as a local model folder: 2 layers of width 32 with the default
model's tokenizer, so the real loop, ranks and engines run in a second per step on the CPU."""

from __future__ import annotations

from pathlib import Path


def save_tiny_llama(path: Path) -> str:
    """Write the model and tokenizer to `path`; returns it as a `model.name`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from backend.policy.model import _gguf_cache_dir, embedded_gguf

    folder, gguf = embedded_gguf()
    cache = _gguf_cache_dir(folder, gguf, torch.float32)  # dequantized by an earlier test: seconds faster
    if cache is not None and (cache / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(cache)
    else:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, eos_token_id=2, bos_token_id=1, pad_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)
