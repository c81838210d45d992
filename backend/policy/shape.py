"""The shape of a Llama-like model, read from its config, and the model inside a peft wrapper.

Both the fast decode engine (fastgen.py) and the memory planner (memory.py)
size their work from a `Spec`; it lives here so neither imports the other.

    >>> spec = Spec(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152, eps=1e-5)
    >>> spec.kv_bytes_per_token()  # SmolLM2-135M, bf16: K and V of every layer
    23040
"""

from __future__ import annotations

from dataclasses import dataclass


def unwrap(model):
    """The transformers model inside a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@dataclass
class Spec:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    eps: float

    @classmethod
    def of(cls, cfg) -> "Spec":
        """From a transformers config (Llama names; other models get rough stand-ins)."""
        h = cfg.hidden_size
        heads = cfg.num_attention_heads
        d = getattr(cfg, "head_dim", None) or h // heads
        return cls(cfg.num_hidden_layers, h, heads, getattr(cfg, "num_key_value_heads", None) or heads, d,
                   getattr(cfg, "intermediate_size", None) or 4 * h, cfg.vocab_size,
                   getattr(cfg, "rms_norm_eps", 1e-5))

    def kv_bytes_per_token(self, dtype_bytes: int = 2, int8: bool = False) -> int:
        """K and V of every layer for one token: in a dtype of `dtype_bytes`, or as the int8 cache
        holds them (`model.kv_int8`: a byte a value and a float32 scale a vector)."""
        per_vector = self.head_dim + 4 if int8 else self.head_dim * dtype_bytes
        return 2 * self.layers * self.kv_heads * per_vector
