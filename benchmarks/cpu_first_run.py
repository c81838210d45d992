"""What a first run showed, from its run.db: promotions, groups alive and why, updates taken.

For each RUN_DIR: the promoted interventions (step, title, the decision's metric, effect, 95%
interval and n), then the training groups before and after the first promotion that is not a
diagnostic revision: dead (every reward ties), alive with both of the evaluator's verdicts in the group
(the evaluator's outcomes differ), alive although the evaluator judged the whole group alike
(a shaping term broke the tie), the steps whose update trained on any rollout, and those whose
update, after the first promotion, held a group alive by the evaluator's verdicts. Validation
and test accuracies are not read here (`benchmarks/heldout_table.py`).

    .venv/bin/python benchmarks/cpu_first_run.py RUN_DIR [RUN_DIR ...] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def promotions(store) -> list[dict]:
    """Promoted (or later rolled back) interventions with their deciding backtest's numbers."""
    out = []
    for r in store.rows("SELECT id, kind, title, status, promoted_step, params_json FROM interventions "
                        "WHERE promoted_step IS NOT NULL ORDER BY promoted_step, id"):
        bts = store.rows("SELECT metrics_json FROM backtests WHERE intervention_id = ? ORDER BY id", (r["id"],))
        dec = (json.loads(bts[-1]["metrics_json"] or "{}").get("decision") or {}) if bts else {}
        out.append(dict(r, decision=dec, template=json.loads(r["params_json"] or "{}").get("template")))
    return out


def groups(store) -> dict[tuple[int, int], dict]:
    """(step, group) -> {rewards, verdicts} of every training rollout."""
    g: dict[tuple[int, int], dict] = defaultdict(lambda: {"rewards": [], "correct": []})
    for r in store.rows("SELECT step, group_idx, reward, correct FROM rollouts"):
        e = g[(r["step"], r["group_idx"])]
        e["rewards"].append(round(float(r["reward"] or 0.0), 9))
        e["correct"].append(bool(r["correct"]))
    return g


def split(gs: dict, steps: range) -> dict:
    """Counts of dead, alive-by-verdicts and alive-by-shaping groups over `steps`."""
    c = {"groups": 0, "dead": 0, "alive_verdicts": 0, "alive_shaping": 0}
    for (step, _), e in gs.items():
        if step not in steps:
            continue
        c["groups"] += 1
        if len(set(e["rewards"])) < 2:
            c["dead"] += 1
        elif len(set(e["correct"])) > 1:
            c["alive_verdicts"] += 1
        else:
            c["alive_shaping"] += 1
    return c


def summary(run_dir: Path) -> dict:
    from backend.store import Store

    store = Store.open(run_dir, readonly=True)
    try:
        run = store.run()
        last = store.last_step()
        proms = promotions(store)
        first = next((p for p in proms if p["kind"] != "diagnostic"), None)  # a retirement pays nothing new
        cut = first["promoted_step"] if first else last
        gs = groups(store)
        steps = store.rows("SELECT step, metrics_json FROM steps ORDER BY step")
        trained = [s["step"] for s in steps if json.loads(s["metrics_json"] or "{}").get("trained_sequences")]
        by_verdicts = sorted({st for (st, _), e in gs.items() if st in trained and st > cut
                              and len(set(e["rewards"])) > 1 and len(set(e["correct"])) > 1})
        acc = store.rows("SELECT AVG(correct) AS a, COUNT(*) AS n FROM rollouts")[0]
    finally:
        store.close()
    return {"run": run_dir.name, "seed": run["seed"], "steps": last, "promotions": proms, "fix": first,
            "before": split(gs, range(1, cut + 1)), "after": split(gs, range(cut + 1, last + 1)),
            "updates": trained, "updates_verdicts": by_verdicts, "train_acc": (acc["a"] or 0.0, acc["n"])}


def _frac(c: dict, key: str) -> str:
    return f"{c[key]}/{c['groups']}" if c["groups"] else "-"


def _dec(d: dict) -> str:
    if not d:
        return ""
    ci = f"[{d.get('ci_low', 0):+.3f}, {d.get('ci_high', 0):+.3f}]"
    return f"{d.get('metric')} {d.get('effect', 0):+.3f} {ci}, n {d.get('n')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    print("| seed | promoted (step: change, decision) | dead before | dead after | alive by verdicts after "
          "| alive by shaping after | steps with an update | after: with a group alive by verdicts | "
          "train accuracy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rd in args.runs:
        s = summary(rd)
        proms = "; ".join(f"{p['promoted_step']}: {p['title']}" + (f" ({_dec(p['decision'])})" if p["decision"]
                                                                  else "") for p in s["promotions"]) or "none"
        a, n = s["train_acc"]
        print(f"| {s['seed']} | {proms} | {_frac(s['before'], 'dead')} | {_frac(s['after'], 'dead')} | "
              f"{_frac(s['after'], 'alive_verdicts')} | {_frac(s['after'], 'alive_shaping')} | "
              f"{len(s['updates'])} of {s['steps']} ({', '.join(map(str, s['updates'])) or '-'}) | "
              f"{', '.join(map(str, s['updates_verdicts'])) or 'none'} | {a:.3f} (n {n}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
