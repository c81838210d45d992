"""What the loop hands to an evolution round: the store, the config, where the run is.

The loop owns the policy; evolution reaches it only through `probe`, which
generates a few groups under a given harness and returns rollout rows (the
same columns as the `rollouts` table, `id` optional), and through `trial`,
which trains throwaway copies of the policy and returns their validation
verdicts. `log(level, message)` writes an event; `checkpoint(activity)` is where a round may be paused or stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from backend.config import RunConfig
from backend.harness.loader import Harness
from backend.store import Store
from backend.types import JSON


@dataclass
class EvolveContext:
    store: Store
    cfg: RunConfig
    step: int
    harness_version: int
    harness: Harness
    probe: Callable[[Harness, int], list[JSON]] | None = None
    trial: Callable[[Harness], tuple[Any, ...]] | None = None
    """`(candidate) -> (incumbent arm, candidate arm)`: policy copies trained `evolve.trial_steps`
    steps under each and validated (`backend.trial`); None where trials are off (the CPU default)."""
    log: Callable[[str, str], None] = lambda level, message: None
    checkpoint: Callable[[str], None] = lambda activity: None
    """Say what the round is doing now ("round at step 5: backtesting 2/4") and let the engine honour
    a pause or a stop there (between candidates); may raise the loop's StopRequested."""
    cache: JSON = field(default_factory=dict)
    """Per-round memo (the incumbent's probe rollouts); the loop may pass a fresh context each round."""

    def auto_promote(self) -> bool:
        return bool(self.store.run().get("auto_promote"))
