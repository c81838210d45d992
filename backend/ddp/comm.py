"""What the ranks of a data-parallel run exchange, and how.

`Channel`: numbered messages from rank 0 and one reply per rank, pickled into
the rendezvous TCPStore. Waiting polls `check` (a blocked `wait` would need a
timeout, and a rank may wait for as long as rank 0 is paused). A rank that
dies is noticed while waiting (`alive` says so), never by a hang.

`sum_grads` and `broadcast_params` are the two tensor collectives; `synced_update` wraps
one update so that every rank takes it or every rank leaves it (a stop met inside it).

Stopping: rank 0 sets `STOP_KEY` in the store when the run ends (launch.ranks); a rank
working on a message checks it between decoder layers and decode steps (`StopWatch`) and
leaves that message, so it reads "end" at its next batch boundary instead of finishing it.
"""

from __future__ import annotations

import os
import pickle
import time
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from backend.errors import EvoError


COLLECTIVE_TIMEOUT = timedelta(minutes=10)
"""Longest one all-reduce or broadcast may wait for a rank: they only run while every rank
is inside the same step (waiting between steps goes through the store, without a timeout)."""


def device_type(cfg) -> str:
    """cuda or cpu: where `model.device` puts the policy here."""
    d = cfg.model.device
    if d == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(d).type


def threads_per_rank(world: int) -> int:
    """Torch's CPU threads in each of `world` ranks of one host: the cores this process may use,
    shared out. Left at torch's default (every core) in each rank, N ranks run N times as many
    threads as there are cores in any parallel CPU op (as torchrun, which starts each rank at one
    thread, avoids); on CUDA the ranks' CPU work (batching, judging, the optimizer's bookkeeping)
    then waits for cores, and on the CPU the passes themselves do."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(world, 1))


FAST_POLL_S = 0.001
FAST_POLL_FOR_S = 5.0
SLOW_POLL_S = 0.05
"""A waiting rank asks the store every millisecond for the first 5 s (inside a step a message is
due within seconds, and each millisecond of lag idles every GPU), then backs off to 50 ms.
(`TCPStore.wait` with a timeout would wake at once, but logs a warning at every timeout.)"""


class DistributedError(EvoError, RuntimeError):
    """A rank of a data-parallel run failed or cannot start; the message names it and why."""


class Channel:
    """Rank 0 sends message `seq` to each rank; each rank answers it once.

    >>> ch = Channel(store, rank=0, world=2)       # doctest: +SKIP
    >>> ch.send("generate", [payload_for_rank1])    # doctest: +SKIP
    >>> ch.replies()                               # doctest: +SKIP
    """

    def __init__(self, store, rank: int, world: int, alive: Callable[[int], str | None] = lambda r: None):
        self.store = store
        self.rank = rank
        self.world = world
        self.alive = alive  # rank -> None, or why that rank is gone
        self.seq = 0

    def _poll(self, key: str, who: int | None) -> bytes:
        pause, t0 = FAST_POLL_S, time.monotonic()
        while not self.store.check([key]):
            if who is not None:
                err = f"err/{who}"
                if self.store.check([err]):
                    raise DistributedError(f"rank {who} failed: {self.store.get(err).decode()}")
                gone = self.alive(who)
                if gone:
                    raise DistributedError(f"rank {who} {gone}")
            time.sleep(pause)
            if time.monotonic() - t0 > FAST_POLL_FOR_S:  # rank 0 is paused, evaluating or evolving
                pause = min(pause * 2, SLOW_POLL_S)
        return self.store.get(key)

    # ---------------------------------------------------------------- rank 0
    def wait_started(self) -> None:
        """Until every rank has said it is up (it then joins the process group)."""
        for r in range(1, self.world):
            self._poll(f"up/{r}", r)

    def wait_ready(self) -> None:
        """Until every rank has loaded its policy and engine (a failure there is raised here)."""
        for r in range(1, self.world):
            self._poll(f"ready/{r}", r)

    def send(self, kind: str, payloads: list) -> None:
        """Message `kind` with one payload per rank 1..N-1."""
        self.seq += 1
        for r, payload in enumerate(payloads, start=1):
            self.store.set(f"msg/{self.seq}/{r}", pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL))

    def replies(self) -> list:
        """Every rank's reply to the last message, ranks 1..N-1 in order."""
        out = []
        for r in range(1, self.world):
            out.append(pickle.loads(self._poll(f"out/{self.seq}/{r}", r)))
            self.store.delete_key(f"out/{self.seq}/{r}")
            self.store.delete_key(f"msg/{self.seq}/{r}")
        return out

    def stop(self) -> None:
        """The run is ending: every rank leaves what it is doing at its next decoder layer or
        decode step (STOP_KEY, `StopWatch`) and replies that it left."""
        self.store.set(STOP_KEY, b"1")

    def end(self) -> None:
        """The run ends: every rank leaves what it is doing (`stop`), then reads "end" and exits."""
        self.stop()
        self.send("end", [None] * (self.world - 1))

    # ---------------------------------------------------------------- ranks 1..N-1
    def started(self) -> None:
        self.store.set(f"up/{self.rank}", b"1")

    def ready(self) -> None:
        self.store.set(f"ready/{self.rank}", b"1")

    def receive(self) -> tuple[str, object]:
        self.seq += 1
        return pickle.loads(self._poll(f"msg/{self.seq}/{self.rank}", None))

    def reply(self, value) -> None:
        self.store.set(f"out/{self.seq}/{self.rank}", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def fail(self, why: str) -> None:
        self.store.set(f"err/{self.rank}", why.encode())


def split(n: int, world: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) shares of n items, sizes differing by at most one.

    >>> split(5, 2)
    [(0, 3), (3, 5)]
    """
    base, extra = divmod(n, world)
    out, start = [], 0
    for r in range(world):
        end = start + base + (r < extra)
        out.append((start, end))
        start = end
    return out


STOP_KEY = "stop"
STOP_POLL_S = 0.2
"""A rank asks the store whether rank 0 is stopping at most this often (one round trip each)."""


class RankStopping(Exception):
    """Raised inside a rank's pass once rank 0 said the run ends: the message in hand is left."""


class StopWatch:
    """`check()` raises RankStopping once rank 0 set STOP_KEY (the layer watch and the fast engine's
    interrupt call it; the store is asked at most every STOP_POLL_S); `asked()` only says so."""

    def __init__(self, store) -> None:
        self.store = store
        self._asked_at = 0.0
        self._stopping = False

    def asked(self) -> bool:
        now = time.monotonic()
        if not self._stopping and now - self._asked_at >= STOP_POLL_S:
            self._asked_at = now
            self._stopping = self.store.check([STOP_KEY])
        return self._stopping

    def check(self) -> None:
        if self.asked():
            raise RankStopping()


class UpdateAbandoned(Exception):
    """Another rank left this update before summing the gradients: no rank takes it."""


def synced_update(step: Callable[[Callable], dict], device) -> dict:
    """Run `step(sync_grads)` (one `GRPOTrainer.step`) so that every rank takes the update or none does.

    Before the gradients are summed (once per epoch) the ranks vote in one all-reduce: a rank
    that leaves the step before its vote (rank 0 meeting a stop inside its backward, a rank whose
    pass raised) votes "leave" on its way out, and the exception goes on; every other rank then
    raises `UpdateAbandoned` at its vote instead of waiting in the gradients' all-reduce for a rank
    that never comes. No rank's optimizer steps in the abandoned epoch."""
    in_collective = False

    def sync(params: list[torch.Tensor]) -> None:
        nonlocal in_collective
        in_collective = True
        if _anyone_leaving(False, device):
            raise UpdateAbandoned()
        sum_grads(params)
        in_collective = False

    try:
        return step(sync)
    except UpdateAbandoned:
        raise
    except BaseException:
        if not in_collective:  # a collective that failed half-way cannot be voted on again
            _anyone_leaving(True, device)
        raise


def _anyone_leaving(leaving: bool, device) -> bool:
    flag = torch.tensor([1.0 if leaving else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.SUM)
    return bool(flag.item() > 0)


def sum_grads(params: list[torch.Tensor]) -> None:
    """All-reduce (sum) the gradients of `params` in one flat buffer; a missing gradient counts as zero.

    Each rank's loss is already divided by the whole batch's token count, so the sum is the
    one-process gradient of the whole batch."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    start = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[start:start + n].view_as(p).to(p.dtype)
        start += n


def broadcast_params(params: list[torch.Tensor]) -> bool:
    """Make every rank's `params` rank 0's; returns whether this rank's values changed."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        dist.broadcast(flat, src=0)
        if dist.get_rank() == 0:
            return False
        start, changed = 0, False
        for p in params:
            n = p.numel()
            new = flat[start:start + n].view_as(p)
            if not torch.equal(p.data, new):
                p.data.copy_(new)
                changed = True
            start += n
        return changed
