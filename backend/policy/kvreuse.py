"""A multi-turn episode's KV cache, kept across its turns (the fast engine, `model.kv_reuse`).

An episode's next turn is its last prompt, the tokens sampled for it, the end of that turn and
the tool's answer. The cache of everything but the new tokens is already in the last call's
workspace. `match` finds, for each new prompt, the row of the last call whose cached tokens start
it (exact token equality: a prompt that starts no row is prefilled whole). `copy_rows` moves
those columns to where the new call's left padding puts them. A rotary position is a column less
its row's padding, so a moved column keeps its position. The new call then prefills from the
first column that some row lacks (`first_column`).

The reused columns of a sampled token were written by the decode step, the rest by the prefill.
Their values agree to rounding, not bit for bit, so a run with reuse is deterministic but is not
bit-identical to one without it: twins must share the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class Cache(Protocol):
    """What this module reads of a fast-engine workspace (backend/policy/fastgen.Workspace)."""

    k: torch.Tensor

    def caches(self) -> list[torch.Tensor]: ...

TAIL = 16
"""Tokens of a cached row's end that key the lookup (a full comparison confirms a hit)."""


@dataclass
class Carry:
    """What the last call left in its workspace, per row."""

    ws: Cache
    tokens: list[list[int]]
    """The tokens whose keys and values the row's cache holds: its prompt, then every sampled
    token but the last (a token is written to the cache when it is fed back, and the last never is)."""
    pad: list[int]


def cached_tokens(prompt: list[int], sampled: list[int]) -> list[int]:
    """The tokens a row's cache holds after a call that sampled `sampled` for `prompt`."""
    return list(prompt) + list(sampled[:-1])


def match(carry: Carry | None, prompts: list[list[int]]) -> list[tuple[int, int, int]]:
    """(new row, old row, cached length) for each new prompt that starts with a row of `carry`,
    the longest such row; the length leaves the prompt's last token out (it gives the logits)."""
    if carry is None:
        return []
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    for j, toks in enumerate(carry.tokens):
        if len(toks) >= TAIL:
            index.setdefault((len(toks), tuple(toks[-TAIL:])), j)
    lengths = sorted({n for n, _ in index}, reverse=True)
    out = []
    for r, p in enumerate(prompts):
        for n in lengths:
            if n > len(p):
                continue
            j = index.get((n, tuple(p[n - TAIL:n])))
            if j is not None and carry.tokens[j] == p[:n]:
                out.append((r, j, min(n, len(p) - 1)))
                break
    return out


def first_column(pad: list[int], matches: list[tuple[int, int, int]]) -> int:
    """The first cache column the new call must compute: every row's cache is valid before it."""
    have = {r: n for r, _, n in matches}
    return min(p + have.get(r, 0) for r, p in enumerate(pad))


def copy_rows(carry: Carry, ws: Cache, matches: list[tuple[int, int, int]], pad: list[int]) -> int:
    """Move the matched rows' cached keys and values into `ws` at the new padding (`ws` may be
    the carried workspace itself: each layer's columns are gathered before any is written).
    Returns the number of token positions reused."""
    if not matches:
        return 0
    dev = ws.k.device
    counts = torch.tensor([n for _, _, n in matches], device=dev)
    offs = torch.arange(int(counts.sum()), device=dev) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    src_r = torch.repeat_interleave(torch.tensor([j for _, j, _ in matches], device=dev), counts)
    dst_r = torch.repeat_interleave(torch.tensor([r for r, _, _ in matches], device=dev), counts)
    src_c = torch.repeat_interleave(torch.tensor([carry.pad[j] for _, j, _ in matches], device=dev), counts) + offs
    dst_c = torch.repeat_interleave(torch.tensor([pad[r] for r, _, _ in matches], device=dev), counts) + offs
    for li in range(ws.k.shape[0]):
        for src, dst in zip(carry.ws.caches(), ws.caches()):
            dst[li][dst_r, :, dst_c] = src[li][src_r, :, src_c]  # (N, Hkv, ...) gathered, then written
    return int(counts.sum())
