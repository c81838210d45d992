"""Rank 0's side of a data-parallel step: share out generation and judging, gather it, share out the update.

The loop calls two methods, in the places where one process would generate
and train (backend/loop.py: `collect(..., dist=)` and `update_policy`):

- `rollouts(slots, harness, ...)`: rank r builds the prompts of slots[start_r:end_r]
  (`task_prompts`), generates them and judges and scores its share (`share.judge`: the evaluator and the
  harness's per-rollout rewards and labels, in its own harness worker) while
  the others do the same; rank 0 returns every rollout in the prompts' order
  with the scores as a `Prescored` worker, so the loop applies the harness to
  the whole batch (groups, filters, advantages) exactly as on one process.
- `update(items, trained, samples, denom)`: the trained rollouts are dealt out
  by token count (`balance`), each rank's loss divided by the whole batch's
  token count, the gradients summed before clipping (the one-process update
  on the batch). A stop met inside it leaves the update on every rank
  (`comm.synced_update`); a pause met there waits for the next checkpoint.

`times` holds rank 0's view of the last step: its own generation, its own
judging, how long it then waited for the other ranks, each rank's own
generation, judging and backward passes up to the gradients' all-reduce with the micro-batches
they ran (`by_rank`; `GRPOTrainer.last_shape`), and how many trained
rollouts the balance moved (benchmarks read it: backend/tools/bench_ddp.py).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

from backend.ddp.balance import balance
from backend.ddp.comm import Channel, DistributedError, UpdateAbandoned, broadcast_params, split, synced_update
from backend.ddp.share import Prescored, judge, judged_rollout, raise_failure
from backend.policy.model import task_prompts
from backend.rollout import from_generation
from backend.policy.grpo import Sample


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
        self.times: dict[str, float] = {}

    def attach(self, engine) -> None:
        """The loop's Engine: its model, trainer, environment, generation and pause/stop control."""
        self.engine = engine

    def rollouts(self, slots: list[tuple], harness, max_new_tokens: int, temperature: float,
                 top_p: float) -> tuple[list, Prescored]:
        """Every rank builds the prompts of its share of `slots` (`task_prompts`), generates, judges
        and scores them; returns all the rollouts, in order (verdicts set), and their harness scores.
        Raises HarnessError or WorkerFailure when the harness fails on any rank, as `score_all`
        would on one process."""
        eng = self.engine
        eng.control.checkpoint()  # a pause or a stop is honoured before the other ranks start
        self.shares = split(len(slots), self.world)
        # Drawn from the step's seeded generator: a resumed step gives every rank the same seed again.
        seeds = torch.randint(0, 2**62, (self.world,)).tolist()
        code, weights = harness.code, harness.spec.weights
        self.channel.send("generate", [
            {"slots": slots[a:b], "max_new_tokens": max_new_tokens, "temperature": temperature,
             "top_p": top_p, "seed": seeds[r], "harness": (code, weights)}
            for r, (a, b) in enumerate(self.shares) if r])
        broadcast_params(trainable(eng.lm.model))  # a rollback on rank 0 reaches every rank
        a, b = self.shares[0]
        t0 = time.perf_counter()
        prompts = task_prompts(eng.lm.tokenizer, slots[a:b])
        with self._stop_spreads():
            gens = eng.generate_fn([p[4] for p in prompts], max_new_tokens, temperature, top_p)
        items = [from_generation(p, g) for p, g in zip(prompts, gens)]
        t1 = time.perf_counter()
        judged = judge(items, eng.env, code, weights, max_new_tokens)
        t2 = time.perf_counter()
        by_rank = [{"gen_ms": (t1 - t0) * 1000, "judge_ms": (t2 - t1) * 1000}]
        for r, reply in enumerate(self.channel.replies(), start=1):
            if reply.get("failed"):
                raise_failure(r, reply["failed"])
            by_rank.append(reply["ms"])
            a, b = self.shares[r]
            prompts = [(g, i, task, *built) for (g, i, task, _), built in zip(slots[a:b], reply["prompts"])]
            items += [judged_rollout(p, g, j) for p, g, j in zip(prompts, reply["gens"], reply["judged"])]
            judged += reply["judged"]
        self.times = {"gen_ms": (t1 - t0) * 1000, "judge_ms": (t2 - t1) * 1000,
                      "wait_ms": (time.perf_counter() - t2) * 1000, "by_rank": by_rank}
        return items, Prescored(code, [j.scores for j in judged])

    def update(self, items: list, trained: list, samples: list[Sample], denom: float | None) -> dict:
        """One GRPO update over `samples` (built from `trained`, a subset of `items`), data-parallel.

        `denom`: the "batch" token count, or None for "live" (the trained tokens of the whole
        batch, as `GRPOTrainer.step` counts them on one process)."""
        eng = self.engine
        sample_of = {id(s): smp for s, smp in zip(trained, samples)}
        # per rank, its trained rollouts as (index in its share, Sample)
        own = [[(k, sample_of[id(s)]) for k, s in enumerate(items[a:b]) if id(s) in sample_of]
               for a, b in self.shares]
        denom = float(denom) if denom else (float(sum(sum(smp.mask) for smp in samples)) or 1.0)
        if not samples:  # as on one process: no update at all
            return eng.trainer.step([], denom)
        plan = balance([[len(smp.prompt_ids) + len(smp.completion_ids) for _, smp in share] for share in own])
        work = [[own[src][j] for src, j in p] for p in plan]  # per rank, the (k, Sample) it trains
        tokens = [float(sum(sum(smp.mask) for _, smp in w)) for w in work]
        self.channel.send("train", [{"plan": [_entry(r, src, own[src][j]) for src, j in plan[r]], "denom": denom}
                                    for r in range(1, self.world)])
        self.times["moved"] = sum(src != r for r, p in enumerate(plan) for src, _ in p)
        t0, marks = time.perf_counter(), []
        try:
            with eng.control.stop_only():  # the other ranks will wait for this one in a collective
                mine = synced_update(lambda sync: self._own_update(work[0], denom, marking(sync, marks)),
                                     eng.lm.device)
        except UpdateAbandoned as e:  # a rank left the update: its failure is raised while reading replies
            replies = self.channel.replies()
            raise DistributedError(f"a rank left the update: {replies}") from e
        replies = self.channel.replies()
        own_ms = ((marks[0] if marks else time.perf_counter()) - t0) * 1000
        mine_then = [{"backward_ms": own_ms, "shape": eng.trainer.last_shape}] + replies
        for rank, reply in enumerate(mine_then):
            if rank < len(self.times.get("by_rank", [])):
                self.times["by_rank"][rank]["backward_ms"] = reply.get("backward_ms", 0.0)
                self.times["by_rank"][rank]["shape"] = reply.get("shape", {})
        return combine([mine] + replies, tokens)

    def _own_update(self, work: list[tuple[int, Sample]], denom: float, sync) -> dict:
        with self._stop_spreads():  # before this rank's vote: the others then leave their passes too
            return self.engine.trainer.step([smp for _, smp in work], denom, sync_grads=sync)

    @contextmanager
    def _stop_spreads(self) -> Iterator[None]:
        """Rank 0 leaving its own pass by an exception (a stop met between layers, or a failure)
        ends the run: the other ranks are told at once, so they leave theirs at their next layer or
        decode step instead of finishing a share nobody will use. (Anything the loop retries, an
        interrupted or out-of-memory batch, is caught inside `generate_fn`.)"""
        try:
            yield
        except BaseException:
            self.channel.stop()
            raise


def marking(sync, marks: list[float]):
    """`sync` (the gradients' all-reduce) noting in `marks` when each rank reaches it: the time
    before it is the rank's own forward and backward passes, after it the wait for the others."""
    def noted(params):
        marks.append(time.perf_counter())
        return sync(params)

    return noted


def _entry(rank: int, src: int, own: tuple[int, Sample]) -> tuple:
    """(k, advantage, mask, token ids): a rollout the rank generated is named by its index k in
    its share; one moved to it from another rank carries its (prompt, completion) token ids."""
    k, smp = own
    if src == rank:
        return k, smp.advantage, smp.mask, None
    return -1, smp.advantage, smp.mask, (smp.prompt_ids, smp.completion_ids)


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
