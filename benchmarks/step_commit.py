"""A step's SQLite commit: a statement a row against `Store.commit_step`, in one run.

The loop commits each step's rollouts, their diagnoses and the step row in one transaction
(`Store.commit_step`). `rollouts` carries a trigger that fills its full-text index, and SQLite
flushes that index at the end of every statement: one INSERT a row pays the flush 512 times a
step. This times, into fresh run stores under --dir (default: a temporary folder; on a GPU host
give the disk its runs use), --steps commits of --rollouts scored math rollouts each:

- a statement a row: `executemany` of one-row INSERTs (the store before multi-row inserts);
- today: `Store.commit_step` (rows in as few statements as SQLite's parameter limit allows);
- today, WAL checkpoint apart: the same with the connection's automatic WAL checkpoint off, and
  `PRAGMA wal_checkpoint(PASSIVE)` run and timed after each commit: what a checkpoint beside the
  loop would take off the commit (its column `checkpoint`).

Prints milliseconds a commit (mean +- 95% interval, median, max) and what each store holds
(rollouts, full-text rows, steps): every path stores the same.

    .venv/bin/python benchmarks/step_commit.py --steps 30
    python3 benchmarks/step_commit.py --steps 30 --dir /root/evohome     # on a GPU host
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.store import Store, _values  # noqa: E402
from benchmarks.code_step import interval  # noqa: E402


class RowAtATimeStore(Store):
    """The store as it inserted before: one prepared one-row INSERT, executed for every row."""

    def _insert_rows(self, table: str, rows: list[dict]) -> None:
        if rows:
            keys = sorted({k for r in rows for k in r})
            cols = ", ".join(f'"{k}"' for k in keys)
            self.conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(keys))})",
                                  [_values(r, keys) for r in rows])


def run_path(store_cls, folder: Path, rows, diags, steps: int, checkpoint_apart: bool) -> dict:
    from backend.config import load_config
    from backend.runs import create_run, harness_code

    cfg = load_config(None, ["evolve.enabled=false"])
    create_run(folder, cfg, harness_code(cfg)).close()
    store = store_cls.open(folder / "run.db", create=False)
    if checkpoint_apart:
        store.conn.execute("PRAGMA wal_autocheckpoint = 0")
        side = sqlite3.connect(str(folder / "run.db"), isolation_level=None)
    commits, checkpoints = [], []
    for step in range(1, steps + 1):
        step_rows = [dict(r, step=step) for r in rows]
        t0 = time.perf_counter()
        store.commit_step({"step": step, "n_rollouts": len(step_rows)}, step_rows, diags)
        commits.append((time.perf_counter() - t0) * 1000)
        if checkpoint_apart:
            t0 = time.perf_counter()
            side.execute("PRAGMA wal_checkpoint(PASSIVE)")
            checkpoints.append((time.perf_counter() - t0) * 1000)
    held = (store.count("rollouts"), store.scalar("SELECT count(*) FROM rollouts_fts"), store.count("steps"),
            store.count("diagnoses"))
    store.close()
    if checkpoint_apart:
        side.close()
    return {"commits": commits, "checkpoints": checkpoints, "held": held}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rollouts", type=int, default=512)
    ap.add_argument("--dir", default=None, help="where the run stores go (default: a temporary folder)")
    args = ap.parse_args()
    from benchmarks.checkpoint_save import step_rows

    rows, diags = step_rows(args.rollouts)
    base = Path(tempfile.mkdtemp(prefix="step-commit-", dir=args.dir))
    paths = {"a statement a row": (RowAtATimeStore, False), "today": (Store, False),
             "today, WAL checkpoint apart": (Store, True)}
    try:
        out = {name: run_path(cls, base / f"run{i}", rows, diags, args.steps, apart)
               for i, (name, (cls, apart)) in enumerate(paths.items())}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"commit of a step of {args.rollouts} rollouts, ms, {args.steps} steps a path, under {args.dir or 'tmp'}")
    print("| path | commit | median | max | checkpoint | rollouts, text-index rows, steps, diagnoses held |")
    print("|---|---|---|---|---|---|")
    for name, r in out.items():
        c = r["commits"]
        ck = interval(r["checkpoints"]) + f" (max {max(r['checkpoints']):.2f})" if r["checkpoints"] else "-"
        print(f"| {name} | {interval(c)} | {statistics.median(c):.2f} | {max(c):.2f} | {ck} | "
              f"{', '.join(map(str, r['held']))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
