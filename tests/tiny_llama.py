"""A tiny random Llama saved as a local model folder: 2 layers of width 32 with the default
model's tokenizer, so the real loop, ranks and engines run in a second per step on the CPU;
and a harness whose reward never ties, so every step of such a run trains."""

from __future__ import annotations

from pathlib import Path


def save_tiny_llama(path: Path, hidden: int = 32) -> str:
    """Write the model and tokenizer to `path`; returns it as a `model.name`. `hidden`: its width
    (another width makes a model no adapter of the default one fits)."""
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
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, eos_token_id=2, bos_token_id=1, pad_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def write_spread_harness(path: Path) -> str:
    """The default math harness plus a reward that differs between completions (no dead groups),
    written to `path`; returns it as a `harness`."""
    from backend.harness.loader import default_harness_path

    code = default_harness_path("math").read_text().replace(
        'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}',
        'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1, "spread": 1.0}')
    assert '"spread"' in code, "the default math harness's REWARD_WEIGHTS changed"
    code += "\n\ndef reward_spread(r):\n    return len(set(r.completion)) / 10 + len(r.completion) / 1000\n"
    path.write_text(code)
    return str(path)
