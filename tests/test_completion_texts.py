"""A completion's text from its token ids (`stops.completion_texts`): the same as the
tokenizer's own `decode` of each row, whichever way the rows are decoded."""

from __future__ import annotations

import random

from backend.policy.stops import completion_texts


def _rows(tok, n: int = 200, seed: int = 0) -> list[list[int]]:
    """Rows of every kind a decode meets: special tokens (EOS, BOS, padding) anywhere, tokens that
    are part of one UTF-8 character, empty rows, long rows."""
    rng = random.Random(seed)
    special = list(tok.all_special_ids)
    multibyte = tok.encode("é ü 北京 🙂 ∑x²", add_special_tokens=False)
    vocab = len(tok)
    rows = [[], special, multibyte, multibyte[:1], multibyte[1:]]
    for _ in range(n):
        rows.append([rng.choice(special + multibyte) if rng.random() < 0.1 else rng.randrange(vocab)
                     for _ in range(rng.randrange(1, 300))])
    return rows


def test_the_batch_decode_gives_what_decode_gives_row_by_row(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert not tok.clean_up_tokenization_spaces and hasattr(tok.backend_tokenizer, "decode_batch")  # the batch path
    eos = [tok.eos_token_id]
    rows = _rows(tok)
    expected = [tok.decode([t for t in r if t not in eos], skip_special_tokens=True) for r in rows]
    assert completion_texts(tok, rows, eos) == expected
    assert any("北京" in t for t in expected) and "" in expected  # the rows cover what they say


def test_a_tokenizer_that_cleans_up_spaces_decodes_row_by_row(tiny_model, monkeypatch):
    """`decode` cleans spaces up for some tokenizers (WordPiece's " ." -> "."), which the
    backend's `decode_batch` does not do: such a tokenizer keeps its own `decode`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    monkeypatch.setattr(tok, "clean_up_tokenization_spaces", True)
    calls = []
    monkeypatch.setattr(tok, "decode", lambda ids, **kw: calls.append(list(ids)) or f"<{len(ids)}>")
    assert completion_texts(tok, [[5, 2, 6], [7]], [2]) == ["<2>", "<1>"]
    assert calls == [[5, 6], [7]]  # EOS left out, one call a row
