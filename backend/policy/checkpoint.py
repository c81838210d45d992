"""LoRA checkpoints, one per policy version, written atomically.

A checkpoint is a folder `checkpoints/step_000012/` holding the peft adapter,
the optimizer state and the RNG states (its tensors taken off the device and written by
`checkpoint_tensors.py`). It is written under a temporary name
and renamed, so a kill never leaves a half-written checkpoint behind a valid
name; leftovers named `.tmp-*` are removed on the next save. Removal is the
same in reverse: renamed out of its valid name first, then deleted. Which
checkpoints a run keeps is `retention.py`'s rule.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from backend.disk import tree_bytes
from backend.policy import checkpoint_tensors


WRITER_SWITCH_S = 0.0002
"""The interpreter's switch interval while a checkpoint thread writes (Python's default: 5 ms).

The writer runs Python code (peft's save, the optimizer state's pickling) beside the loop's own
thread. The loop's thread releases the interpreter's lock while the GPU works (a CUDA graph's
replay, a sync), and then waits for the writer to hand the lock back, up to an interval each
time. The next step's decode loop is then host-bound. A shorter interval hands the lock back
sooner (`benchmarks/checkpoint_beside_decode.py` times both)."""

_switch = {"writers": 0, "saved": None}
_switch_lock = threading.Lock()


def _writing(fn):
    """`fn` run with the switch interval at `WRITER_SWITCH_S` (at most), restored when the last
    writer ends."""
    def run(*args):
        with _switch_lock:
            if _switch["writers"] == 0:
                _switch["saved"] = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch["saved"], WRITER_SWITCH_S))
            _switch["writers"] += 1
        try:
            return fn(*args)
        finally:
            with _switch_lock:
                _switch["writers"] -= 1
                if _switch["writers"] == 0:
                    sys.setswitchinterval(_switch["saved"])
    return run


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def saved_steps(run_dir: Path) -> list[int]:
    """Steps with a checkpoint folder under `run_dir/checkpoints`, ascending."""
    root = Path(run_dir) / "checkpoints"
    steps = []
    for p in root.glob("step_*") if root.is_dir() else []:
        tail = p.name.removeprefix("step_")
        if tail.isdigit() and p.is_dir():
            steps.append(int(tail))
    return sorted(steps)


def remove(run_dir: Path, step: int) -> None:
    """Delete one checkpoint: renamed to a `.tmp-*` name first (atomic), so a kill mid-delete
    leaves no partial checkpoint under a valid name; the next save clears the leftover."""
    final = checkpoint_dir(run_dir, step)
    if not final.exists():
        return
    doomed = final.parent / f".tmp-pruned-{final.name}-{os.getpid()}"
    os.replace(final, doomed)
    _fsync_dir(final.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def estimate_bytes(run_dir: Path, model) -> int:
    """Bytes the next checkpoint will take: the newest one's size, or before the first, the
    trainable parameters three times over (the adapter and the optimizer's two moments)."""
    steps = saved_steps(run_dir)
    if steps:
        return tree_bytes(checkpoint_dir(run_dir, steps[-1]))
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def save(run_dir: Path, step: int, model, optimizer, extra: dict | None = None, state: dict | None = None) -> Path:
    """The adapter, the optimizer, the random states and the trainer's `state` (plain data: its
    memory plan) at `step`; `extra` goes to meta.json. Written to a temporary folder, then renamed."""
    return begin_save(run_dir, step, model, optimizer, extra, state).result()


def begin_save(run_dir: Path, step: int, model, optimizer, extra: dict | None = None,
               state: dict | None = None) -> Future:
    """`save`, with the files written by a thread: returns a future of the checkpoint's path. The
    random states are taken now; the model and the optimizer are read by the thread, so the caller
    changes neither until the future is done. The training loop writes the files while the store
    inserts the step's rows, and commits the step only once the future is done
    (`Store.commit_step`'s `ready`): a kill never leaves a stored version without its files."""
    rng = {"torch_rng": torch.get_rng_state(), "py_rng": random.getstate()}
    taken = checkpoint_tensors.take(model, optimizer)  # on this thread: the writer never touches the device
    pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
    try:
        return pool.submit(_writing(write), run_dir, step, model, optimizer, {**rng, **(state or {})}, extra, taken)
    finally:
        pool.shutdown(wait=False)  # the thread ends with its one job


def write(run_dir: Path, step: int, model, optimizer, trainer_state: dict, extra: dict | None,
          taken: checkpoint_tensors.Taken | None = None) -> Path:
    """The files of `save`, into a temporary folder renamed to `checkpoint_dir(run_dir, step)`.
    `taken`: the tensors already on the host (`checkpoint_tensors.take`), else peft and
    `torch.save` write them from the model and the optimizer."""
    final = checkpoint_dir(run_dir, step)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if taken is not None:
        tmp.mkdir(exist_ok=True)
        checkpoint_tensors.write(tmp, taken, trainer_state)
    else:
        model.save_pretrained(str(tmp))
        torch.save({"optimizer": optimizer.state_dict() if optimizer is not None else None, **trainer_state},
                   tmp / "trainer_state.pt")
    (tmp / "meta.json").write_text(json.dumps({"step": step, **(extra or {})}))
    _fsync_dir(tmp)
    if final.exists():  # a re-run of a step that never got committed
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def load_trainer_state(path: Path, optimizer) -> dict:
    """Restore the optimizer and the random states saved at `path`; returns everything saved there."""
    f = Path(path) / "trainer_state.pt"
    if not f.exists():
        return {}
    state = torch.load(f, weights_only=False)
    saved = checkpoint_tensors.load_optimizer(Path(path), state)
    if optimizer is not None and saved:
        optimizer.load_state_dict(saved)
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["py_rng"])
    return state


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
