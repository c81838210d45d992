"""Where a completion ends: the EOS tokens of a model, cutting a row after the first, and the
completions' text.

Shared by the engines that return raw token rows (plain generate, the fast engine, vLLM).
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


def completion_texts(tok, rows: list[list[int]], eos: list[int]) -> list[str]:
    """Each row's text, its EOS tokens and special tokens left out, as `tok.decode` gives it.

    A fast tokenizer that cleans up no spaces decodes the rows in one call to its Rust backend
    (`decode_batch`: parallel over rows, and without the per-call work of `decode`, about half
    of its time for 512 rows of 256 tokens); any other decodes a row at a time."""
    eos_set = set(eos)
    rows = [[t for t in r if t not in eos_set] for r in rows]
    backend = getattr(tok, "backend_tokenizer", None)
    cleans_up = getattr(tok, "clean_up_tokenization_spaces", True)
    if backend is not None and hasattr(backend, "decode_batch") and not cleans_up:
        return backend.decode_batch(rows, skip_special_tokens=True)
    return [tok.decode(r, skip_special_tokens=True) for r in rows]


def finished_rows(tok, rows: list[list[int]], eos: list[int],
                  stop_at_eos: bool = True) -> list[tuple[list[int], str, str]]:
    """Each row as an engine returns it: (its ids cut after the first EOS where `stop_at_eos`,
    its finish, its text)."""
    cuts = [finish_at_eos(row, eos) if stop_at_eos else (row, "length") for row in rows]
    texts = completion_texts(tok, [ids for ids, _ in cuts], eos)
    return [(ids, finish, text) for (ids, finish), text in zip(cuts, texts)]
