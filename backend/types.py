"""Types shared across layers that belong to none of them.

`Generation` is what a policy's generation engine returns and what an
environment's multi-turn episodes consume, so it lives below both: `policy`
and `envs` import it from here and never from each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Generation:
    """One sampled continuation from the policy."""

    ids: list[int]
    text: str
    finish: str  # "stop" or "length"
    logprobs: list[float] | None = None


# generate(list of prompt token-id lists, max_new_tokens, temperature, top_p) -> generations
GenerateFn = Callable[[list[list[int]], int, float, float], list[Generation]]
