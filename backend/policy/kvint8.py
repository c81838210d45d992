"""The fast engine's 8-bit KV cache (`model.kv_int8`): half the bytes attention reads.

At batch 512 a decode step's attention reads every row's keys and values, and at a few hundred
columns that read is half the step (docs/results/gpu-speed-h200-s21). Kept as int8, each (row,
head, column) vector of D values carries one float32 scale: its largest magnitude over 127, the
values rounded to the nearest multiple of it. The error of a value is at most half a step,
1/254 of the vector's largest magnitude; the policy's distribution moves by that rounding
(`evotui bench --only dist` measures it against the bf16 cache).

The Triton kernels (backend/policy/fastattn.py) write and read this layout themselves, with the
same arithmetic as `quantize`; the torch kernels and the prefill use these functions.
"""

from __future__ import annotations

import torch

LEVELS = 127.0
"""The largest magnitude of a stored value: int8 without -128, so the range is symmetric."""


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values, float32 scales) of x (..., D): x ~ values * scales[..., None].

    Rounds half up (floor(x / step + 0.5)), as the Triton kernels do; a zero vector has scale 0."""
    xf = x.float()
    peak = xf.abs().amax(-1)
    inv = torch.where(peak > 0, LEVELS / peak, torch.zeros_like(peak))
    q = torch.floor(xf * inv[..., None] + 0.5).clamp_(-LEVELS, LEVELS).to(torch.int8)
    return q, peak / LEVELS


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The values `quantize` stored, in `dtype`."""
    return (q.float() * scale[..., None]).to(dtype)
