"""One engine a run: an exclusive lock on `RUN_DIR/engine.lock`, held while the engine lives.

The runs row's pid says which engine runs, but it is written once the model has loaded, so two
`--resume` of one run started together both passed that check, trained the same step, and the one
that lost the race recorded the run as crashed under the other. The lock is taken before the
store is written, and the kernel releases it when its process ends, however it ends (a kill -9
too). It is a POSIX record lock (`lockf`): a process's children, forked or not, never hold it.

    with held(run_dir):        # StoreError, one line, if another engine holds it
        ...                    # the engine's whole life
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backend.store import StoreError

NAME = "engine.lock"


@contextmanager
def held(run_dir: Path) -> Iterator[None]:
    """Hold the run's engine lock for the block; refuse (StoreError) if another process holds it."""
    fd = os.open(Path(run_dir) / NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EACCES or EAGAIN: another process holds it
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise StoreError(f"{run_dir} is already running: engine pid {holder} holds it (wait for it to end, "
                             f"or stop it: evotui stop {run_dir})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
