"""What a run's search spends per knob and family, and what it gets back, over real rounds in
which validation stands still and then moves: the search memory's effect in one table.

The rounds are real (`run_round`: propose, screen, replay in the harness worker, probe, judge)
over a synthetic run (6 steps of 4 groups x 4 rollouts), supervised or auto-promoting, with the test suite's
stand-in policy for probes (`synthetic_run.make_probe`: it writes answer tags more often when
the system prompt shows an example). Validation (64 problems) is evaluated every 10 steps (a
round every 5, as in the defaults): 8 of 64 right until step `--jump`, then 24 of 64, beyond the
interval of 8/64. Counted from the `backtests` rows alone, so the script measures commits from
before the search memory too:

    .venv/bin/python benchmarks/search_memory.py              # per family: tries, rollouts, verdicts
    .venv/bin/python benchmarks/search_memory.py --auto     # promotions change the harness: moves recur
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
ROUNDS = 24
JUMP = 70
N_VAL = 64


def run_rounds(rounds: int, jump: int, auto: bool) -> tuple[dict[str, dict[str, float]], int]:
    """({family: {tries, rollouts, replay_rows, verdict counts}}, memory skips) after `rounds` rounds."""
    from backend.config import RunConfig
    from backend.evolve import run_round
    from synthetic_run import add_eval, build_run, context, make_probe, outcomes

    store = build_run(Path(tempfile.mkdtemp()) / "run.db", steps=6)
    add_eval(store, 0, outcomes(N_VAL, 8))
    store.set_run(auto_promote=int(auto))
    cfg = RunConfig()
    for r in range(rounds):
        step = 5 * (r + 1)
        out = run_round(context(store, step=step, cfg=cfg, probe=make_probe(groups=2, group_size=4)))
        if out.summary.get("error"):
            raise SystemExit(f"round {r} failed: {out.summary['error']}")
        if step % 10 == 0:
            add_eval(store, step, outcomes(N_VAL, 8 if step < jump else 24))
    fams: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seen: set[int] = set()
    for row in store.rows("SELECT i.id, i.kind, i.params_json, b.mode, b.n_rollouts, b.verdict FROM backtests b "
                          "JOIN interventions i ON i.id = b.intervention_id ORDER BY b.id"):
        p = json.loads(row["params_json"] or "{}")
        fam = p.get("knob") or p.get("template") or f"{row['kind']}:{(p.get('names') or ['?'])[0]}"
        f = fams[fam]
        f["replay_rows" if row["mode"] == "replay" else "rollouts"] += row["n_rollouts"] or 0
        if row["id"] not in seen:
            seen.add(row["id"])
            f["tries"] += 1
        f[row["verdict"]] += 1
    held = sum(1 for row in store.rows("SELECT skipped_json FROM rounds WHERE skipped_json IS NOT NULL")
               for s in json.loads(row["skipped_json"] or "[]") if str(s.get("reason", "")).startswith("search memory"))
    store.close()
    return fams, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--jump", type=int, default=JUMP, help="the step from which validation is 24/64, not 8/64")
    ap.add_argument("--auto", action="store_true", help="auto-promote (the harness changes, so moves recur)")
    args = ap.parse_args()
    fams, held = run_rounds(args.rounds, args.jump, args.auto)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"commit {rev.strip() or '?'}: {args.rounds} {'auto-promoting' if args.auto else 'supervised'} rounds, "
          f"validation moves at step {args.jump}; "
          f"{held} draws held by the search memory")
    print(f"{'family':36} {'tries':>5} {'rollouts':>8} {'replay rows':>11}  "
          "verdicts (backtests; rollouts: candidate arms)")
    rows = sorted(fams.items(), key=lambda kv: (-kv[1]["rollouts"], -kv[1]["tries"], kv[0]))
    for fam, f in rows:
        verdicts = ", ".join(f"{v} {int(f[v])}" for v in ("passed", "inconclusive", "failed") if f.get(v))
        print(f"{fam:36} {int(f['tries']):>5} {int(f['rollouts']):>8} {int(f['replay_rows']):>11}  {verdicts}")
    total = {k: sum(f.get(k, 0) for f in fams.values()) for k in ("tries", "rollouts", "replay_rows", "inconclusive")}
    print(f"{'all':36} {int(total['tries']):>5} {int(total['rollouts']):>8} {int(total['replay_rows']):>11}  "
          f"inconclusive {int(total['inconclusive'])}")


if __name__ == "__main__":
    main()
