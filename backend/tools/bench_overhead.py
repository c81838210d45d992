"""Where a loop step's time outside generation and training goes (`evotui bench --only step`).

The step row gives scoring, diagnosis and store as the loop records them; this
splits a step further by timing the functions the loop calls, patched in place for
the step's duration (the loop's code is unchanged and runs as always):

- evaluator    `rollout.evaluate_all`: the task's verifier on every rollout (math-verify)
- harness      `rollout.apply_harness`: rewards, labels, filters, advantages in the
               sandboxed harness worker (the round trip included); after a decode that
               judged rows early, the request of the rows left
- early answers `rollout.answered`: the wait after the decode for the answers to the rows
               sent to the harness worker while the rest decoded (`rollout.JudgedEarly`)
- group stats  `loop.group_stats`: the step's group metrics
- checkpoint   `checkpoint.write`: the LoRA adapter and the optimizer state, written by a
               thread while the step's rows are built and inserted
- rows         `loop.rollout_row`, `diagnosis_rows`, `turn_rows`: the step's records
- commit       `Store.commit_step`: one SQLite transaction; without `train.checkpoint_overlap`
               it waits for the checkpoint's files before it commits, and that wait (the
               step's `ckpt_wait_ms`) is given apart (`split_wait`): "checkpoint wait"
- retention    `retention.prune`: old checkpoints deleted

Each is wall time on the host; on CUDA some of it waits for the device (a checkpoint
copies the adapter back).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import wraps

TARGETS = (
    ("backend.rollout", "evaluate_all", "evaluator"),
    ("backend.rollout", "apply_harness", "harness"),
    ("backend.rollout", "answered", "early answers"),
    ("backend.loop", "group_stats", "group stats"),
    ("backend.policy.checkpoint", "write", "checkpoint"),
    ("backend.loop", "rollout_row", "rows"),
    ("backend.loop", "diagnosis_rows", "rows"),
    ("backend.loop", "turn_rows", "rows"),
    ("backend.store:Store", "commit_step", "commit"),
    ("backend.policy.retention", "prune", "retention"),
)


def _owner(path: str):
    import importlib

    mod, _, cls = path.partition(":")
    m = importlib.import_module(mod)
    return getattr(m, cls) if cls else m


@contextmanager
def clocked(ms: dict[str, float]):
    """Inside the block, each of `TARGETS` adds its wall time (ms) to `ms[label]`."""
    saved = []
    for path, name, label in TARGETS:
        owner = _owner(path)
        fn = getattr(owner, name)
        saved.append((owner, name, fn))
        setattr(owner, name, _timed(fn, label, ms))
    try:
        yield ms
    finally:
        for owner, name, fn in reversed(saved):
            setattr(owner, name, fn)


def _timed(fn, label: str, ms: dict[str, float]):
    @wraps(fn)
    def run(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            ms[label] = ms.get(label, 0.0) + (time.perf_counter() - t) * 1000
    return run


WAIT = "checkpoint wait"
"""The part of `Store.commit_step`'s time spent waiting for the checkpoint's files."""


def split_wait(ms: dict[str, float], wait_ms: float) -> dict[str, float]:
    """`ms` with the commit's wait for the checkpoint's files (`wait_ms`, the step's
    `ckpt_wait_ms`) taken out of "commit" and given as `WAIT`: the inserts and the wait apart."""
    if wait_ms and "commit" in ms:
        ms["commit"] -= wait_ms
        ms[WAIT] = wait_ms
    return ms


def breakdown(ms: dict[str, float], total_ms: float) -> str:
    """"evaluator 80 ms (3.1%), harness ..." in `TARGETS` order, then any other label of `ms`."""
    labels = list(dict.fromkeys(label for _, _, label in TARGETS))
    labels += [k for k in ms if k not in labels]
    return ", ".join(f"{k} {ms.get(k, 0.0):.0f} ms ({ms.get(k, 0.0) / max(total_ms, 1e-9):.1%})" for k in labels)
