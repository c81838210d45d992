"""Where each run's steps went: generation, scoring, diagnosis, training, storing, and the rest.

    python benchmarks/step_split.py COMPARE_DIR [--json OUT.json]

Reads every run directory under COMPARE_DIR (any folder holding a `run.db`), and for each arm
prints the median over its runs' steps of each part of a step (the `steps` table's `*_ms`
columns), the median step, and the mean completion length. "other" is the step less its timed
parts (evolution rounds and held-out evaluations are not steps, so they are not in it). With
--json it also writes every run's per-step rows, small enough to bring back from a device
machine where the databases stay.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.store import Store  # noqa: E402

PARTS = ("gen_ms", "score_ms", "diagnose_ms", "train_ms", "store_ms")
COLUMNS = ("step", *PARTS, "total_ms", "n_rollouts", "tokens", "mean_completion_tokens", "dead_group_frac",
           "reward_mean")


def run_steps(run_dir: Path) -> dict:
    """{"run": name, "arm": the run's name without its seed, "steps": [one dict per step]}."""
    s = Store.open(run_dir, readonly=True)
    try:
        rows = s.rows(f"SELECT {', '.join(COLUMNS)} FROM steps ORDER BY step")
    finally:
        s.close()
    name = run_dir.name
    return {"run": name, "arm": name.rsplit("-s", 1)[0], "steps": [dict(r) for r in rows]}


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def arm_table(runs: list[dict]) -> list[dict]:
    """One row per arm: medians over all its runs' steps, in seconds."""
    by_arm: dict[str, list[dict]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], []).extend(r["steps"])
    table = []
    for arm, steps in sorted(by_arm.items()):
        row = {"arm": arm, "steps": len(steps)}
        for col in (*PARTS, "total_ms"):
            m = _median([st[col] for st in steps])
            row[col] = None if m is None else m / 1000
        timed = sum(row[c] or 0 for c in PARTS)
        row["other"] = None if row["total_ms"] is None else row["total_ms"] - timed
        row["completion_tokens"] = _median([st["mean_completion_tokens"] for st in steps])
        table.append(row)
    return table


def _cell(v, f="{:.2f}") -> str:
    return "-" if v is None else f.format(v)


def render(table: list[dict]) -> str:
    head = "| arm | steps | step s | generate | score | diagnose | train | store | other | completion tokens |"
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['arm']} | {t['steps']} | {_cell(t['total_ms'])} | {_cell(t['gen_ms'])} | "
                     f"{_cell(t['score_ms'])} | {_cell(t['diagnose_ms'])} | {_cell(t['train_ms'])} | "
                     f"{_cell(t['store_ms'])} | {_cell(t['other'])} | {_cell(t['completion_tokens'], '{:.0f}')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("--json", type=Path, help="write every run's per-step rows here")
    args = ap.parse_args(argv)
    dirs = sorted(p.parent for p in args.compare_dir.glob("*/run.db"))
    if not dirs:
        print(f"step_split: no run directory (with a run.db) under {args.compare_dir}", file=sys.stderr)
        return 2
    runs = [run_steps(d) for d in dirs]
    print("Median over steps, seconds (" + str(args.compare_dir) + ")\n")
    print(render(arm_table(runs)))
    if args.json:
        args.json.write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
