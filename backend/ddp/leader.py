"""Rank 0's side of a data-parallel step: share out generation, gather it, share out the update.

The loop calls two methods, in the places where one process would generate
and train (backend/loop.py: `collect(..., generate=)` and `update_policy`):

- `generate(prompts, ...)`: rank r generates prompts[start_r:end_r]; rank 0
  returns every completion in the prompts' order, so the loop scores and
  stores the batch exactly as it would on one process.
- `update(items, trained, samples, denom)`: every rank trains on the rollouts
  it generated, each loss divided by the whole batch's token count, the
  gradients summed before clipping (the one-process update on the batch).
"""

from __future__ import annotations

import torch

from backend.ddp.comm import Channel, broadcast_params, split, sum_grads
from backend.policy.grpo import Sample
from backend.types import Generation


def trainable(model) -> list[torch.Tensor]:
    """The LoRA parameters, in the order every rank sees them."""
    return [p for p in model.parameters() if p.requires_grad]


class Leader:
    """Rank 0 of a data-parallel run (made by `backend.ddp.launch.ranks`)."""

    def __init__(self, channel: Channel, world: int):
        self.channel = channel
        self.world = world
        self.engine = None
        self.shares: list[tuple[int, int]] = []

    def attach(self, engine) -> None:
        """The loop's Engine: its model, trainer, generation and pause/stop control."""
        self.engine = engine

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                 top_p: float) -> list[Generation]:
        """Every rank generates its share of `prompts`; returns all the completions, in order."""
        eng = self.engine
        eng.control.checkpoint()  # a pause or a stop is honoured before the other ranks start
        self.shares = split(len(prompts), self.world)
        # Drawn from the step's seeded generator: a resumed step gives every rank the same seed again.
        seeds = torch.randint(0, 2**62, (self.world,)).tolist()
        self.channel.send("generate", [
            {"prompts": prompts[a:b], "max_new_tokens": max_new_tokens, "temperature": temperature,
             "top_p": top_p, "seed": seeds[r]} for r, (a, b) in enumerate(self.shares) if r])
        broadcast_params(trainable(eng.lm.model))  # a rollback on rank 0 reaches every rank
        a, b = self.shares[0]
        out = list(eng.generate_fn(prompts[a:b], max_new_tokens, temperature, top_p))
        for gens in self.channel.replies():
            out += gens
        return out

    def update(self, items: list, trained: list, samples: list[Sample], denom: float | None) -> dict:
        """One GRPO update over `samples` (built from `trained`, a subset of `items`), data-parallel.

        `denom`: the "batch" token count, or None for "live" (the trained tokens of the whole
        batch, as `GRPOTrainer.step` counts them on one process)."""
        eng = self.engine
        sample_of = {id(s): smp for s, smp in zip(trained, samples)}
        shares = [[(k, sample_of[id(s)]) for k, s in enumerate(items[a:b]) if id(s) in sample_of]
                  for a, b in self.shares]
        tokens = [float(sum(sum(smp.mask) for _, smp in share)) for share in shares]
        denom = float(denom) if denom else (sum(tokens) or 1.0)
        if not samples:  # as on one process: no update at all
            return eng.trainer.step([], denom)
        self.channel.send("train", [{"plan": [(k, smp.advantage, smp.mask) for k, smp in share], "denom": denom}
                                    for share in shares[1:]])
        own = eng.trainer.step([smp for _, smp in shares[0]], denom, sync_grads=sum_grads)
        return combine([own] + self.channel.replies(), tokens)


def combine(stats: list[dict], tokens: list[float]) -> dict:
    """The step's metrics from every rank's: the loss is a sum (each rank divided by the batch's
    count); means per token are weighted by the rank's trained tokens; the gradient norm is the
    all-reduced one, the same on every rank."""
    total = sum(tokens)

    def mean(key: str) -> float:
        if not total:
            return float("nan") if key == "entropy" else 0.0
        return sum(s[key] * t for s, t in zip(stats, tokens) if t) / total

    return {"loss": sum(s["loss"] for s in stats), "kl": mean("kl"), "clip_frac": mean("clip_frac"),
            "grad_norm": stats[0]["grad_norm"], "entropy": mean("entropy"), "tokens": int(total)}
