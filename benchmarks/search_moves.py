"""Forty real rounds from the default math harness on a synthetic run: how many moves each
search-space knob took, and how many of those changed nothing the gate could see.

The rounds are real (`run_round`: propose, screen, replay in the harness worker, judge) over a
synthetic run of 6 steps of 4 groups x 4 rollouts, supervised (nothing is promoted, so every
round searches around the same harness, as a long run does once its promotions stop) and
without a policy (a change that needs fresh generations fails for want of one). "Changed
nothing": a replayed decision whose 95% interval lies within 0.001 of 0 (read from the
`backtests` columns, so the script measures commits from before `space.changed_nothing` too).

    .venv/bin/python benchmarks/search_moves.py            # a table per knob
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
ROUNDS = 40
NO_EFFECT = 1e-3


def run_rounds(rounds: int) -> list[dict]:
    """Each knob move of `rounds` rounds: {knob, to, verdict, nothing}."""
    from backend.evolve import run_round
    from synthetic_run import build_run, context

    store = build_run(Path(tempfile.mkdtemp()) / "run.db", steps=6)
    for r in range(rounds):
        out = run_round(context(store, step=6 + r))
        summary = getattr(out, "summary", out)
        if summary.get("error"):
            raise SystemExit(f"round {r} failed: {summary['error']}")
    moves = []
    for row in store.rows("SELECT i.id, i.params_json, b.verdict, b.mode, b.ci_low, b.ci_high FROM interventions i "
                          "JOIN backtests b ON b.id = (SELECT MAX(id) FROM backtests WHERE intervention_id = i.id) "
                          "WHERE i.params_json LIKE '%\"knob\"%' ORDER BY i.id"):
        p = json.loads(row["params_json"])
        lo, hi = row["ci_low"], row["ci_high"]
        nothing = row["mode"] == "replay" and lo is not None and hi is not None and max(abs(lo), abs(hi)) <= NO_EFFECT
        moves.append({"knob": p["knob"], "to": p.get("to"), "verdict": row["verdict"], "nothing": nothing})
    store.close()
    return moves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    args = ap.parse_args()
    moves = run_rounds(args.rounds)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"commit {rev.strip() or '?'}: {args.rounds} rounds, {len(moves)} knob moves")
    print(f"{'knob':32} {'moves':>5} {'changed nothing':>15} {'distinct values':>15}  verdicts")
    for knob in sorted({m["knob"] for m in moves}):
        mine = [m for m in moves if m["knob"] == knob]
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(Counter(m["verdict"] for m in mine).items()))
        print(f"{knob:32} {len(mine):5} {sum(m['nothing'] for m in mine):15} "
              f"{len({str(m['to']) for m in mine}):15}  {verdicts}")
    print(f"{'all':32} {len(moves):5} {sum(m['nothing'] for m in moves):15}")


if __name__ == "__main__":
    main()
