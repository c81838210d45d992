"""Starting and ending the ranks of a data-parallel run.

    with ranks(cfg, adapter) as leader:      # None when the run is one process
        Engine(run_dir, cfg, store, dist=leader).run()

Rank 0 is this process (it keeps the loop, its signals and its pid, so `kill
-9` of the run's pid ends the run as on one process: the other ranks notice
that rank 0 is gone and exit). Ranks 1..N-1 are child processes running
`follower.main` (`_start_method` says how they start). They meet at a TCPStore
on the loopback interface that rank 0 serves. A script that starts a
data-parallel run needs the `if __name__ == "__main__":` guard, as any
multiprocessing program that spawns does.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from typing import Iterator

import torch
import torch.distributed as dist

from backend.config import RunConfig, to_dict
from backend.ddp.comm import COLLECTIVE_TIMEOUT, Channel, DistributedError, device_type, threads_per_rank
from backend.ddp.leader import Leader

JOIN_S = 10.0
"""How long rank 0 waits for the other ranks to exit after the last message, before ending them."""


def world_size(cfg: RunConfig) -> int:
    """How many ranks `train.gpus` asks for here: 0 (auto) is every visible CUDA GPU (1 on the CPU).

    On the CPU, N > 1 runs N gloo processes (tests; a CPU has no faster way to use them)."""
    want = cfg.train.gpus
    cuda = torch.cuda.device_count() if device_type(cfg) == "cuda" else 0
    if want == 0:
        return max(cuda, 1)
    if cuda and want > cuda:
        raise DistributedError(f"train.gpus is {want} but only {cuda} CUDA GPU(s) are visible here "
                               f"(--gpus auto takes them all)")
    return want


def check(cfg: RunConfig, world: int) -> None:
    """One clear line for a configuration a data-parallel run cannot honour."""
    if world == 1:
        return
    if device_type(cfg) == "cuda" and cfg.model.device not in ("auto", "cuda"):
        raise DistributedError(f"model.device is '{cfg.model.device}' but train.gpus={world} places rank r on "
                               f"the r-th visible GPU; leave model.device at auto (choose cards with "
                               f"CUDA_VISIBLE_DEVICES)")
    if "swe" in cfg.domains:
        raise DistributedError("the swe domain runs multi-turn episodes on one process; "
                               "use train.gpus=1 (or spread runs with evotui compare)")
    if cfg.train.tasks_per_step < world:
        raise DistributedError(f"train.tasks_per_step ({cfg.train.tasks_per_step}) is below train.gpus ({world}): "
                               f"some rank would have nothing to generate")


def describe(cfg: RunConfig) -> str:
    """The run's device in words: cuda:0, cpu, "2 x cuda", "2 x cpu"."""
    world = world_size(cfg)
    kind = device_type(cfg)
    if world > 1:
        return f"{world} x {kind}"
    if kind == "cuda":
        d = cfg.model.device
        return d if ":" in d else f"cuda:{torch.cuda.current_device()}"
    return kind


@contextlib.contextmanager
def ranks(cfg: RunConfig, adapter: str | None) -> Iterator[Leader | None]:
    """Start ranks 1..N-1 (N from `train.gpus`), yield rank 0's `Leader`, end them all on exit.

    `adapter`: the checkpoint rank 0 resumes from (the others load its weights and optimizer
    state from it); None for a fresh adapter (every rank draws the same one from the seed)."""
    world = world_size(cfg)
    check(cfg, world)
    if world == 1:
        yield None
        return
    cuda = device_type(cfg) == "cuda"
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # one host: the loopback interface
        os.environ.setdefault(var, "lo")
    threads = torch.get_num_threads()
    if not cfg.model.threads:  # N processes share the cores, on CUDA too
        torch.set_num_threads(threads_per_rank(world))
    store = dist.TCPStore("127.0.0.1", 0, world, True, timeout=COLLECTIVE_TIMEOUT, wait_for_workers=False)
    ctx = _start_method(cuda)
    from backend.ddp import follower

    procs = [ctx.Process(target=follower.main, name=f"evotui-rank{r}",
                         args=(r, world, store.port, to_dict(cfg), adapter, os.getpid()))
             for r in range(1, world)]

    def gone(rank: int) -> str | None:
        code = procs[rank - 1].exitcode
        return None if code is None else f"exited (code {code})"

    channel = Channel(store, 0, world, alive=gone)
    try:
        gpus = _visible_gpus() if cuda else []
        for r, p in enumerate(procs, start=1):
            with _only_gpu(gpus[r] if cuda else None):
                p.start()
        channel.wait_started()  # a rank that cannot even start is reported, not waited for
        if cuda:
            torch.cuda.set_device(0)
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore("pg", store), rank=0,
                                world_size=world, timeout=COLLECTIVE_TIMEOUT)
        channel.wait_ready()
        yield Leader(channel, world)
    finally:
        with contextlib.suppress(Exception):  # ranks leave the message in hand, read "end" and exit
            channel.end()
        _join(procs)
        if dist.is_initialized():
            dist.destroy_process_group()
        torch.set_num_threads(threads)


def _visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


@contextlib.contextmanager
def _only_gpu(gpu: str | None):
    """A rank started in here sees one GPU, its own, as cuda:0 (CUDA_VISIBLE_DEVICES), so every
    library in it (the engines, vLLM, the memory estimate) uses that card without being told."""
    if gpu is None:
        yield
        return
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        yield
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


FOLLOWER_MODULES = ["backend.ddp.follower", "backend.policy.load", "backend.policy.generate", "transformers", "peft"]


def _start_method(cuda: bool):
    """How the ranks start: `spawn` on CUDA (each child starts CUDA itself; nothing forked may
    hold it), and on the CPU a forkserver that imported the ranks' modules once, so the ranks of a
    later run in this process (tests, `bench --only ddp`) start in about a second instead of ten."""
    if cuda:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FOLLOWER_MODULES)
    return ctx


def _join(procs) -> None:
    """Wait for the ranks to exit; end any that do not (after an error they may be inside a step)."""
    import time

    procs = [p for p in procs if p.pid is not None]  # started
    deadline = time.monotonic() + JOIN_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
