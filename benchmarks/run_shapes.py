"""Which batch sizes did each run train with, and when did memory change them?

    python benchmarks/run_shapes.py RUN_DIR [RUN_DIR ...]

A step's arithmetic depends on its training micro-batch and its generation
batch, so two runs of one seed that ran different sizes at some step train on
different bits from there on. For each run: the LoRA trainer and generation
engine it logged, its micro-batch and generation batch as spans of steps
(`metrics_json`), and every out-of-memory
retry it logged with the step it happened in (a line repeated at one step is counted, not
repeated: a run can log thousands). Used beside
`benchmarks/twin_steps.py` by `benchmarks/trajectory_split.sh`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.store import Store  # noqa: E402

SETUP_LINES = ("LoRA trainer:", "generation engine")
OOM_LINE = "GPU out of memory"
SHOWN = 10
"""Distinct out-of-memory lines listed per run (the count covers them all)."""


def spans(values: list[tuple[int, object]]) -> str:
    """[(1, 64), (2, 64), (3, 32)] -> '1-2: 64; 3: 32'."""
    out: list[str] = []
    for i, (step, v) in enumerate(values):
        if i and values[i - 1][1] == v:
            continue
        end = step
        for later, w in values[i + 1:]:
            if w != v:
                break
            end = later
        out.append(f"{step}-{end}: {v}" if end != step else f"{step}: {v}")
    return "; ".join(out) or "-"


def step_of(ts: str, stored: list[tuple[int, str]]) -> int | None:
    """The step a log line belongs to: the first step stored at or after it."""
    return next((step for step, at in stored if at >= ts), None)


def describe(run_dir: str) -> list[str]:
    s = Store.open(Path(run_dir), readonly=True)
    try:
        rows = s.step_metrics()
        totals = sorted(r["total_ms"] for r in s.step_series() if r["total_ms"] is not None)
        setup = [r["message"] for key in SETUP_LINES for r in s.log_lines(key)]
        ooms = s.log_lines(OOM_LINE)
    finally:
        s.close()
    metrics = [(r["step"], json.loads(r["metrics_json"] or "{}")) for r in rows]
    stored = [(r["step"], r["created_at"]) for r in rows]
    median = f", median step {totals[len(totals) // 2] / 1000:.2f} s" if totals else ""
    lines = [f"{Path(run_dir).name}: {len(rows)} steps{median}"]
    lines += [f"  {m}" for m in setup]
    lines.append("  micro-batch: " + spans([(st, m.get("micro_batch", "?")) for st, m in metrics]))
    lines.append("  generation batch: " + spans([(st, m.get("gen_batch", "?")) for st, m in metrics]))
    # a retry storm logs one line per attempt: count them by step and message
    by_step = Counter(f"step {step_of(r['ts'], stored) or '?'}: {r['message']}" for r in ooms)
    lines += [f"  {key}" + (f" (x{n})" if n > 1 else "") for key, n in list(by_step.items())[:SHOWN]]
    if len(by_step) > SHOWN:
        lines.append(f"  ... {len(by_step) - SHOWN} more out-of-memory steps")
    lines.append(f"  out-of-memory retries: {len(ooms)}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for run_dir in argv:
        if not (Path(run_dir) / "run.db").is_file():
            print(f"{run_dir}: no run.db here", file=sys.stderr)
            return 2
        print("\n".join(describe(run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
