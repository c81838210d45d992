"""What a full garbage-collector pass costs a process with the policy loaded, before and
after `gc.freeze()` (backend/heap.py), in one run.

    .venv/bin/python benchmarks/gc_pass.py

Loads the run's default model as `evotui run` does, times a full `gc.collect()` five times
(the baseline), freezes the heap, times it five times again, and prints a table.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.config import RunConfig  # noqa: E402
from backend.heap import freeze_long_lived  # noqa: E402
from backend.policy.load import load_fast_policy  # noqa: E402


def full_passes(n: int = 5) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        gc.collect()
        out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def main() -> int:
    cfg = RunConfig()
    lm = load_fast_policy(cfg.model, None, seed=0)  # noqa: F841 (kept alive: it is what is measured)
    tracked = len(gc.get_objects())
    before = full_passes()
    frozen = freeze_long_lived()
    after = full_passes()
    print(f"objects tracked with the policy loaded: {tracked:,}; frozen: {frozen:,}")
    print("| full gc.collect() (5 passes) | min ms | median ms |\n|---|---|---|")
    print(f"| baseline: policy loaded | {before[0]:.1f} | {before[2]:.1f} |")
    print(f"| after gc.freeze() | {after[0]:.1f} | {after[2]:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
