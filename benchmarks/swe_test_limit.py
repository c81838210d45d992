"""What an SWE turn's tests wait for when one edit never returns, at two `swe.test_timeout_s`.

A turn's test runs go out as one batch on the warm sandbox pool (`repos.run_tests_many`), and the
turn waits for the slowest. The batch here: --runs runs of the seed repositories' visible and
hidden tests, unedited (they pass), with --runaway of them given an edit that loops forever at
import, as a policy's edit can. Each limit in --limits is timed --repeats times, alternating;
prints seconds per batch (mean +- 95% interval), passed and timed-out counts, and the slowest
unedited run alone (the margin a limit leaves).

    .venv/bin/python benchmarks/swe_test_limit.py --runs 64 --runaway 1 --limits 10,2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    from backend.envs.swe import repos
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=64)
    ap.add_argument("--runaway", type=int, default=1)
    ap.add_argument("--limits", default="10,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    names = repos.repo_names()
    targets = [repos.VISIBLE_DIR, repos.HIDDEN_DIR]
    batch = []
    for i in range(args.runs):
        files = dict(repos.repo_files(names[i % len(names)]))
        if i >= args.runs - args.runaway:  # the last runs: an edit that never returns
            path = repos.source_files(files)[0]
            files[path] = "while True:\n    pass\n" + files[path]
        batch.append((files, targets))
    repos.run_tests_many(batch[: args.runs - args.runaway])  # start the workers: not timed
    alone = []
    for files, t in batch[: len(names)]:
        t0 = time.perf_counter()
        repos.run_tests_many([(files, t)])
        alone.append(time.perf_counter() - t0)
    limits = [float(x) for x in args.limits.split(",")]
    times: dict[float, list[float]] = {t: [] for t in limits}
    runs = {}
    for _ in range(args.repeats):
        for lim in limits:
            t0 = time.perf_counter()
            runs[lim] = repos.run_tests_many(batch, timeout_s=lim)
            times[lim].append(time.perf_counter() - t0)
    print(f"swe test runs: {args.runs} a batch, {args.runaway} of them endless, {args.repeats} repeats, "
          f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}, warm pool; slowest unedited run alone "
          f"{max(alone) * 1000:.0f} ms ({len(alone)} repositories)")
    print("| swe.test_timeout_s | tests s per batch (mean +- 95%) | passed | timed out |\n|---|---|---|---|")
    for lim in limits:
        r = runs[lim]
        print(f"| {lim:g} | {interval(times[lim])} | {sum(x.status == 'passed' for x in r)} | "
              f"{sum(x.status == 'timeout' for x in r)} |")


if __name__ == "__main__":
    main()
