"""Where a completion ends: the EOS tokens of a model, and cutting a row after the first.

Shared by the engines that return raw token rows (plain generate, vLLM).
"""

from __future__ import annotations


def eos_ids(model, tok) -> list[int]:
    """The tokens that end a completion: the tokenizer's EOS and the model's generation config's."""
    ids = {tok.eos_token_id}
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([extra] if isinstance(extra, int) else list(extra or []))
    return sorted(i for i in ids if i is not None)


def finish_at_eos(row: list[int], eos: list[int]) -> tuple[list[int], str]:
    """Cut a row after its first EOS (kept: the policy must learn to stop)."""
    for j, t in enumerate(row):
        if t in eos:
            return row[:j + 1], "stop"
    return row, "length"
