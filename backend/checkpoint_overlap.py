"""A step's checkpoint written while the next step generates (`train.checkpoint_overlap`).

Without it the loop writes a step's checkpoint beside the step's inserts and commits once the
files are in place (`Store.commit_step(..., ready=...)`): the step's end waits for the files,
about 250 ms on a GPU host, a tenth of a GRPO step. With it:

- the step's rows commit at once; the step's metrics name the version it saves
  (`version_pending`), which is not stored yet;
- the files are written after the commit, while the next step generates, which reads the model
  and changes nothing;
- `settle` waits for them and stores the version (`Store.add_policy_version`) before anything
  that changes the model (the next update), reads the run's policy (an evaluation, an evolution
  round, an operator's command) or ends the run;
- a write that fails removes the step (`Store.drop_step`) and raises: the store holds nothing of
  a step whose files are missing, as without the overlap.

A stop or crash between the commit and `settle` leaves a step whose version is pending. `recover`,
at the next start, stores the version if its folder is there (a checkpoint is renamed into place
whole, backend/policy/checkpoint.py) and otherwise removes the step, so the resumed run trains it
again from the version before, with the step's own seeds. Either way the run continues as one
that never stopped.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from backend.policy.checkpoint import checkpoint_dir
from backend.store import Row, Store


@dataclass
class Pending:
    """A committed step whose checkpoint's files are being written."""

    step: int
    version: Row
    """The policy version's row, without its id (the store numbers it)."""
    writing: Future


def settle(pending: Pending, store: Store) -> tuple[int, float]:
    """Wait for `pending`'s files and store its version: (the version's id, ms waited). A write
    that failed removes the step from the store and raises what it raised."""
    t = time.perf_counter()
    try:
        pending.writing.result()
    except Exception:
        store.drop_step(pending.step)
        raise
    waited_ms = (time.perf_counter() - t) * 1000
    return store.add_policy_version(pending.step, pending.version), waited_ms


def recover(store: Store, run_dir: Path) -> str | None:
    """Settle a version that a stop or crash left pending (the module docstring): what was done,
    for the run's log, or None when nothing was pending."""
    found = store.pending_version()
    if found is None:
        return None
    step, version = found
    if checkpoint_dir(run_dir, step).is_dir():
        store.add_policy_version(step, version)
        return f"step {step}'s checkpoint was in place when the run stopped: its policy version is stored"
    store.drop_step(step)
    return f"step {step}'s checkpoint never reached the disk: the step is removed and will be trained again"
