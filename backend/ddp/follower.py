"""Ranks 1..N-1 of a data-parallel run: a child process that generates and trains when rank 0 asks.

It loads the policy on its own device (the one GPU it sees, or the CPU), from the checkpoint
rank 0 resumes from when there is one (weights and optimizer state), then
answers rank 0's messages until "end":

- generate: take rank 0's LoRA weights (broadcast), seed, build this rank's
  share of the prompts from the tasks' chat messages (`task_prompts`),
  generate them, judge and score them (the evaluator, and the
  harness's rewards and labels in this rank's own sandboxed harness worker:
  `share.judge`), reply with the prompts, the completions and that plain data;
- train: build the samples rank 0 dealt to it (rollouts it generated, named
  by index, and rollouts moved to it, with their token ids) with the
  advantages rank 0 computed, take the GRPO update with the gradients summed
  over ranks, reply with the metrics.

When rank 0 ends the run (a stop, an error) it sets the store's stop key: a
rank in the middle of a message leaves it at its next decoder layer or decode
step (`comm.StopWatch`; an update is left on every rank together,
`comm.synced_update`), replies that it left, and reads "end".

It never opens the run database and writes nothing to the run directory.
It exits when rank 0 does: rank 0's pid is gone (kill -9 of the run), or the
store rank 0 serves goes away.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from backend.config import config_from_dict
from backend.ddp.comm import (COLLECTIVE_TIMEOUT, Channel, RankStopping, StopWatch, UpdateAbandoned,
                              broadcast_params, device_type, synced_update, threads_per_rank)
from backend.ddp.leader import marking, trainable
from backend.ddp.share import failure, judge
from backend.harness.check import HarnessError
from backend.harness.client import WorkerFailure
from backend.policy.interrupt import GenerationInterrupted, watch as watch_layers
from backend.policy.model import task_prompts
from backend.rollout import from_generation


def main(rank: int, world: int, port: int, cfg_dict: dict, adapter: str | None, parent: int) -> None:
    """Entry point of rank `rank` (multiprocessing spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; rank 0 decides
    _exit_with(parent)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout=COLLECTIVE_TIMEOUT)
    channel = Channel(store, rank, world)
    try:
        cfg = config_from_dict(cfg_dict)
        cuda = device_type(cfg) == "cuda"
        if cuda:  # rank 0 started this rank seeing only its own GPU (launch._only_gpu)
            torch.cuda.set_device(0)
            cfg.model.device = "cuda:0"
        if not cfg.model.threads:  # the ranks share the host's cores
            torch.set_num_threads(threads_per_rank(world))
        channel.started()
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore("pg", store), rank=rank,
                                world_size=world, timeout=COLLECTIVE_TIMEOUT)
        rank_state = Follower(cfg, adapter)
        from backend.heap import freeze_long_lived

        freeze_long_lived()  # this process lives for the run: its policy stays out of the collector's passes
        channel.ready()
        rank_state.serve(channel)
    except Exception as e:
        traceback.print_exc()
        try:
            channel.fail(f"{type(e).__name__}: {e}"[:1000])
        finally:
            os._exit(1)
    if dist.is_initialized():
        dist.destroy_process_group()


def _exit_with(parent: int) -> None:
    """End this process once rank 0 is gone, even if it died by kill -9 (rank 0 may not be the
    parent: on the CPU the ranks come from a forkserver)."""
    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(3)

    threading.Thread(target=watch, name="watch-rank0", daemon=True).start()


class Follower:
    def __init__(self, cfg, adapter: str | None):
        from backend.envs import make_env
        from backend.policy.generate import apply_engine_settings, make_generator
        from backend.policy.grpo import GRPOTrainer
        from backend.policy.load import load_fast_policy

        self.lm = load_fast_policy(cfg.model, adapter, seed=cfg.seed)
        # rank 0's batch size: another decode shape would draw other samples (and may run slower)
        self.generator = make_generator(cfg.model.engine, self.lm.model, self.lm.tokenizer, self.lm.device,
                                        batch_size=cfg.model.gen_batch, log=lambda msg: None)  # rank 0 logs which
        apply_engine_settings(self.generator, cfg.model, lambda msg, level="info": None)  # rank 0 says it
        self.trainer = GRPOTrainer(self.lm.model, self.lm.tokenizer, cfg.train, self.lm.device)
        if adapter:
            self.trainer.resume(Path(adapter))
        self.params = trainable(self.lm.model)
        self.env = make_env(cfg)  # the evaluator of this rank's share
        self.prompts: list[list[int]] = []
        self.gens: list = []

    def serve(self, channel: Channel) -> None:
        self.stop = StopWatch(channel.store)
        watch_layers(self.lm.model, self.stop.check)  # rank 0 ending the run is met between layers
        while True:
            kind, msg = channel.receive()
            if kind == "end":
                return
            handle = {"generate": self.generate, "train": self.train}.get(kind)
            if handle is None:
                raise ValueError(f"unknown message {kind!r} from rank 0")
            try:
                channel.reply(handle(msg))
            except (RankStopping, GenerationInterrupted, UpdateAbandoned):
                channel.reply({"left": kind})  # rank 0 is ending the run: "end" comes next

    def generate(self, msg: dict) -> list:
        if broadcast_params(self.params) and hasattr(self.generator, "refresh"):
            self.generator.refresh()  # weights set in place (a rollback on rank 0): engines re-read them
        torch.manual_seed(msg["seed"])
        t0 = time.perf_counter()
        prompts = task_prompts(self.lm.tokenizer, msg["slots"])
        self.prompts = [p[4] for p in prompts]
        self.gens = self._generate(msg)
        items = [from_generation(p, g) for p, g in zip(prompts, self.gens)]
        code, weights = msg["harness"]
        t1 = time.perf_counter()
        try:
            judged = judge(items, self.env, code, weights, msg["max_new_tokens"])
        except (HarnessError, WorkerFailure) as e:  # rank 0 stops the run with it, as on one process
            return {"gens": self.gens, "failed": failure(e)}
        return {"gens": self.gens, "judged": judged, "prompts": [(p[3], p[4]) for p in prompts],
                "ms": {"gen_ms": (t1 - t0) * 1000, "judge_ms": (time.perf_counter() - t1) * 1000}}

    def _generate(self, msg: dict) -> list:
        while True:
            try:
                args = (self.prompts, msg["max_new_tokens"], msg["temperature"], msg["top_p"])
                if getattr(self.generator, "interruptible", False):  # its own kernels: no layer watch there
                    return self.generator.generate(*args, interrupt=self.stop.asked)
                return self.generator.generate(*args)
            except torch.cuda.OutOfMemoryError:  # as rank 0's loop does: halve the batch, retry
                torch.cuda.empty_cache()
                size = int(getattr(self.generator, "batch_size", 1) or 1)
                if size <= 1:
                    raise
                self.generator.batch_size = size // 2

    def train(self, msg: dict) -> dict:
        from backend.policy.grpo import Sample

        samples = [Sample(*ids, mask, adv) if ids else Sample(self.prompts[k], self.gens[k].ids, mask, adv)
                   for k, adv, mask, ids in msg["plan"]]
        if getattr(self.generator, "name", "") == "vllm":
            self.generator.sleep()  # give vLLM's memory back to training, as rank 0 does
        t0, marks = time.perf_counter(), []
        stats = synced_update(lambda sync: self.trainer.step(samples, msg["denom"], sync_grads=marking(sync, marks)),
                              self.lm.device)
        return dict(stats, backward_ms=((marks[0] if marks else time.perf_counter()) - t0) * 1000,
                    shape=self.trainer.last_shape)
