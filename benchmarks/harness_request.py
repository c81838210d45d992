"""What one request to the harness worker costs, by its size: the default math harness scoring
1, 64 and 512 rollouts of a math batch (`benchmarks/score_overlap.py`'s), through this process's
sandboxed worker, as `apply_harness` asks it. The cost a request pays whatever its size (its
child's fork and the harness's load) is paid once a step for the batch, once more for each
chunk of rows sent while the rest decode (`rollout.JudgedEarly`), and by every backtest; where
requests of one code come apart, the worker forks and loads spare children between them
(backend/harness/worker_main.py), off the requests' time.

Prints ms a request (mean +- 95% interval) after a warm-up request. `--gap-ms`: the wait between
two requests (in a step: a chunk of rows every 16 decode steps, the batch's request once the
decode ends); 0 sends them back to back. To compare two commits, run it from a checkout of
each, alternating:

    .venv/bin/python benchmarks/harness_request.py --repeats 10 --gap-ms 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    from backend.harness.client import shared_worker
    from backend.harness.loader import load_default
    from backend.rollout import as_rollout
    from benchmarks.code_step import interval
    from benchmarks.score_overlap import batch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--sizes", default="1,64,512")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="wait between two requests")
    args = ap.parse_args(argv)
    harness = load_default("math")
    worker = shared_worker()
    views = [as_rollout(s, 128).view() for s in batch(64, 8, seed=3)]
    worker.apply(harness.code, harness.spec.weights, views[:1])  # the worker starts and warms up
    print(f"{args.gap_ms:g} ms between requests")
    print(f"{'rollouts':>8} {'ms a request (mean +- 95%)':>28} {'best':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        ms = []
        for _ in range(args.repeats):
            time.sleep(args.gap_ms / 1000)
            t = time.perf_counter()
            worker.apply(harness.code, harness.spec.weights, views[:n])
            ms.append((time.perf_counter() - t) * 1000)
        print(f"{n:>8} {interval(ms):>28} {min(ms):>8.1f}")


if __name__ == "__main__":
    main()
