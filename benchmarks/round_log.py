"""What each evolution round of a run did, and the errors it logged.

    python benchmarks/round_log.py RUN_DIR [RUN_DIR ...]

For each run that evolved: one line a round (its step and stored summary, which
starts with "error:" when the round stopped on an exception), then every
error the run logged (step and first line; a traceback's last lines below it).
`benchmarks/gpu_evidence.sh` writes this beside the report, so a device call
brings back why a round proposed nothing (the run databases stay on the
GPU machine).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.store import Store  # noqa: E402


def run_lines(run_dir: Path) -> list[str]:
    """The lines for one run (none when it held no round)."""
    s = Store.open(run_dir, readonly=True)
    try:
        rounds = s.rows("SELECT step, summary FROM rounds ORDER BY id")
        if not rounds:
            return []
        out = [f"== {run_dir.name}: {len(rounds)} rounds"]
        out += [f"  round at step {r['step']}: {r['summary']}" for r in rounds]
        for e in s.rows("SELECT step, message FROM events WHERE level = 'error' ORDER BY id"):
            first, *rest = (e["message"] or "").splitlines() or [""]
            out.append(f"  error at step {e['step']}: {first[:300]}")
            out += [f"    {line}" for line in rest[-12:]]  # a traceback's last frames and its exception
        return out
    finally:
        s.close()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for arg in argv:
        try:
            print("\n".join(run_lines(Path(arg))))
        except Exception as e:  # one unreadable run must not hide the others
            print(f"== {arg}: cannot read: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
