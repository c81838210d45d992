"""What evolution's side of the loop needs from the engine that trains the policy.

`backend.evolve_hooks` (the policy handle a round gets, crash-proof calls) and
`backend.trial` (paired trials) take a `Training`, not the `Engine`: the loop
passes itself, and nothing here imports the loop, so the loop depends on them
and never the other way round. The interface is the short list below: generate
and score a batch under a harness, take one GRPO update, the policy's pieces a
trial snapshots and restores, the store, the config and the run's log.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from backend.config import RunConfig
from backend.envs.base import Env
from backend.harness.loader import Harness
from backend.rollout import Scored
from backend.store import Store


class Activity(Protocol):
    """The engine's control channel, as far as a round uses it (`backend.dispatch.Control`)."""

    activity: str | None

    def checkpoint(self, activity: str) -> None:
        """Say what runs now and honour a pause or a stop here (may raise StopRequested)."""

    def report(self, activity: str | None) -> None:
        """Say what runs now, without stopping."""


class Training(Protocol):
    """The engine as evolution's hooks and trials see it (`backend.loop.Engine` implements it)."""

    cfg: RunConfig
    store: Store
    env: Env
    control: Activity
    harness: Harness
    harness_version: int
    policy_version: int
    lm: Any
    """The policy: `.model` (its LoRA parameters) and `.device`."""
    trainer: Any
    """The GRPO trainer: `.opt` (the optimizer) and `.plan` (its memory plan), which a trial restores."""
    generator: Any
    """The generation engine: its batch limit, which an out-of-memory retry lowers."""

    def seed_step(self, step: int) -> random.Random:
        """Seed torch and return a Python RNG for `step` (the same seeds every time)."""

    def collect(self, tasks: Any, harness: Harness, group_size: int, greedy: bool = False,
                max_new_tokens: int | None = None) -> tuple[list[Scored], dict[str, Any]]:
        """Generate `group_size` rollouts per task and score them under `harness` (not stored)."""

    def update_policy(self, items: list[Scored]) -> tuple[list[Any], dict[str, Any]]:
        """One GRPO update of the live policy on the rollouts the harness trains on."""

    def say(self, msg: str, level: str = "info", step: int | None = None) -> None:
        """A line in the run's log."""
