"""Held-out accuracy of finished runs, every evaluation, with 95% intervals (a sweep's table).

For each RUN_DIR: its harness, learning rate and steps, then one row per
evaluation and split: correct of n, the accuracy and its Wilson 95% interval.
With `--baseline RUN_DIR`, each run's last evaluation is also compared with
the baseline's last one problem by problem (same held-out tasks): the paired
difference with Newcombe's 95% interval and the exact McNemar p-value
(`backend.evolve.stats.paired_binary`, the gate's own test). Choose on the
validation rows; test is reported only.

    .venv/bin/python benchmarks/heldout_table.py /tmp/sweep/lr2e-5 /tmp/sweep/lr1e-4 --baseline /tmp/sweep/lr2e-5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPLITS = ("validation", "test")


def load(run_dir: Path) -> dict:
    """The run's settings that a sweep varies, and its evaluations as {(step, split): results}."""
    from backend.store import Store

    store = Store.open(run_dir, readonly=True)
    try:
        run = store.run()
        cfg = json.loads(run["config_json"])
        evals = {(row["step"], split): json.loads(row["results_json"] or "[]")
                 for split in SPLITS for row in store.evals(split)}
        done = store.last_step()
    finally:
        store.close()
    return {"name": run_dir.name, "harness": Path(cfg.get("harness") or "default").name,
            "lr": cfg["train"]["lr"], "evolve": cfg["evolve"]["enabled"], "status": run["status"],
            "steps": f"{done}/{cfg['steps']}", "evals": evals}


def accuracy_rows(run: dict) -> list[str]:
    from backend.evolve.stats import wilson_interval

    out = []
    for (step, split), res in sorted(run["evals"].items(), key=lambda kv: (kv[0][0], SPLITS.index(kv[0][1]))):
        k, n = sum(bool(r["correct"]) for r in res), len(res)
        lo, hi = wilson_interval(k, n)
        out.append(f"| {run['name']} | {split} | {step} | {k}/{n} | {k / n if n else 0:.3f} | {lo:.3f}-{hi:.3f} |")
    return out


def last(run: dict, split: str) -> tuple[int, dict[str, bool]] | None:
    steps = [s for s, sp in run["evals"] if sp == split]
    if not steps:
        return None
    step = max(steps)
    return step, {r["task_id"]: bool(r["correct"]) for r in run["evals"][(step, split)]}


def paired_rows(runs: list[dict], base: dict) -> list[str]:
    from backend.evolve.stats import paired_binary

    out = []
    for run in runs:
        for split in SPLITS:
            a, b = last(base, split), last(run, split)
            if run is base or a is None or b is None:
                continue
            ids = sorted(set(a[1]) & set(b[1]))
            e = paired_binary([a[1][i] for i in ids], [b[1][i] for i in ids])
            d = e.detail
            out.append(f"| {run['name']} | {split} | {b[0]} vs {a[0]} | {e.effect:+.3f} | [{e.ci_low:+.3f}, "
                       f"{e.ci_high:+.3f}] | {e.p_value:.3g} | {d['only_new']} / {d['only_old']} | {e.n} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--baseline", type=Path, help="the run every other run is paired with")
    args = ap.parse_args(argv)
    for d in [*args.runs, *([args.baseline] if args.baseline else [])]:
        if not (d / "run.db").is_file():
            print(f"heldout_table: {d} is not an evotui run (no run.db)", file=sys.stderr)
            return 2
    runs = [load(d) for d in args.runs]
    print("| run | harness | lr | evolution | status | steps |\n|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['name']} | {r['harness']} | {r['lr']:g} | {'on' if r['evolve'] else 'off'} "
              f"| {r['status']} | {r['steps']} |")
    print("\n| run | split | step | correct | accuracy | 95% CI (Wilson) |\n|---|---|---|---|---|---|")
    for r in runs:
        print("\n".join(accuracy_rows(r)))
    if args.baseline:
        base = next((r for r in runs if r["name"] == args.baseline.name), None) or load(args.baseline)
        print(f"\nPaired with {base['name']} on the same problems (last evaluation of each):\n")
        print("| run | split | steps | difference | 95% CI (Newcombe) | McNemar p | only run / only baseline | n |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(paired_rows(runs, base)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
