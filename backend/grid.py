"""Runs side by side on one machine: which GPUs they may use, how a card is shared, and a stop.

`evotui compare --jobs` and a population of runs (`backend/population`) both launch
`evotui run --headless` processes and pack them on the visible cards the same way:
each new run on the GPU with the fewest runs (`pick_gpu`), runs that share a card
each holding an equal slice of it (`card_share`, `grid_config`). `Stopping` turns a
SIGTERM or Ctrl-C into "launch nothing more, pass SIGTERM on to the running ones".
"""

from __future__ import annotations

import math
import os
import signal
from typing import Any

from backend.config import RunConfig, to_dict


def visible_gpus() -> list[str]:
    """The GPU ids runs can be pinned to: CUDA_VISIBLE_DEVICES if set, else torch's count."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


CARD_USE = 0.9
"""Share of a card that the runs placed on it may hold together (the rest: the CUDA context, other users)."""


def card_share(jobs: int, gpus: list[str], share: float) -> float:
    """`model.gpu_share` for a run of a `--jobs` grid: a set share is kept; runs that share a
    card (more jobs than visible GPUs) get an equal slice of it. Without one, the run that meets
    an out-of-memory error first halves its micro-batch for good, and which run that is depends
    on its neighbours: twins of one seed then train on different arithmetic
    (docs/results/gpu-trajectory-split).

    >>> card_share(8, ["0", "1"], 0.0), card_share(2, ["0", "1"], 0.0), card_share(8, [], 0.0)
    (0.225, 0.0, 0.0)
    >>> card_share(8, ["0", "1"], 0.5)
    0.5
    """
    if share or not gpus:
        return share
    per_card = math.ceil(jobs / len(gpus))
    return round(CARD_USE / per_card, 3) if per_card > 1 else share


def grid_config(base: RunConfig, jobs: int, gpus: list[str], quiet: bool = True) -> dict:
    """The config every new run of a `--jobs` grid starts from: `base`, with its card share."""
    base_d = to_dict(base)
    share = card_share(jobs, gpus, base.model.gpu_share)
    if share != base.model.gpu_share:
        base_d["model"]["gpu_share"] = share
        if not quiet:
            print(f"{jobs} runs over {len(gpus)} GPU(s): each new run holds at most {share:g} of its card "
                  "(model.gpu_share; set it to override)", flush=True)
    return base_d


def pick_gpu(gpus: list[str], busy: list[str]) -> str | None:
    """The visible GPU with the fewest running runs (the first on a tie); None with 0 or 1 GPU."""
    if len(gpus) < 2:
        return None
    return min(gpus, key=lambda g: (busy.count(g), gpus.index(g)))




class Stopping:
    """SIGTERM or Ctrl-C to a compare: launch no more runs, pass SIGTERM on to those running (each
    stops at its next step boundary with its state saved, `backend/loop.py`), wait for them, and
    write compare.json as usual; the same command again resumes. A second Ctrl-C leaves at once.

    Without it a SIGTERM (a scheduler's time limit, `timeout`) killed compare alone while its
    runs trained on as orphans, and a run it launched in the moment before could be killed while
    it was created, leaving a half-made run folder (`runs.run_dirs_in` skips such staging folders)."""

    def __init__(self) -> None:
        self.requested = False
        self.sent = False
        """The running runs were sent SIGTERM."""
        self._old: dict[signal.Signals, Any] = {}

    def __enter__(self) -> Stopping:
        import threading

        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGINT and self.requested:
            raise KeyboardInterrupt
        self.requested = True
