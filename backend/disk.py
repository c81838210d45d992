"""Disk use of a run: its size, and whether one more checkpoint fits.

Long runs and many-arm comparisons once filled a machine's disk: one LoRA
checkpoint per policy version, kept forever. Checkpoints are now pruned
(`backend/policy/retention.py`), and before each one the loop asks
`room_problem` whether it fits the run's disk budget and leaves the minimum
free space; when not, the run stops with one line and its state saved. No
torch here: `evotui runs` reads run sizes through this module.

    >>> human_bytes(55_000_000)
    '55.0 MB'
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

GB = 1_000_000_000


def tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (0 when it does not exist); links are not followed."""
    total = 0
    stack = [Path(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # pruned or replaced while we looked
                continue
    return total


def human_bytes(n: float) -> str:
    """Decimal units, as disks are sold and `df -H` prints them."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def room_problem(run_dir: Path, need: int, budget_gb: float, min_free_gb: float) -> str | None:
    """Why `need` more bytes must not be written into `run_dir`, or None when they fit.

    Two limits: the run folder's size after the write against `budget_gb` (0: no
    budget), and the free space left on its disk against `min_free_gb`.
    """
    if budget_gb > 0:
        used = tree_bytes(run_dir)
        if used + need > budget_gb * GB:
            return (f"disk budget: the run folder holds {human_bytes(used)} and the next checkpoint needs about "
                    f"{human_bytes(need)}, past train.disk_budget_gb={budget_gb:g}")
    free = shutil.disk_usage(run_dir).free
    if free - need < min_free_gb * GB:
        return (f"disk nearly full: {human_bytes(free)} free, the next checkpoint needs about {human_bytes(need)} "
                f"and train.min_free_gb={min_free_gb:g} must stay free")
    return None
