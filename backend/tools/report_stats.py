"""What `evotui report` says about arms over seeds: intervals, paired differences, budget.

Per arm, over its seeds: the final test accuracy (the test evaluation at the
latest step) and the area under the test-accuracy curve (trapezoid over the
evaluation steps, divided by the step range, so it is on the accuracy
scale), each as mean with a 95% Student t-interval over seeds. Per arm
against the baseline (static-expert): the difference paired by seed, with a
95% t-interval over the per-seed differences. Budget per arm: wall time (the
run row's first to last write, so it includes model loading and any time a
stopped run waited before a resume), training rollouts (`steps.n_rollouts`)
and probe rollouts (`backtests.n_rollouts` where mode = 'probe').

    >>> m, lo, hi = t_interval([0.2, 0.3, 0.4])
    >>> round(m, 3), round(lo, 3), round(hi, 3)
    (0.3, 0.052, 0.548)
    >>> area([{"step": 0, "accuracy": 0.0}, {"step": 10, "accuracy": 1.0}])
    0.5

Pure Python (no numpy, no scipy).
"""

from __future__ import annotations

import statistics
from datetime import datetime

from backend.store import Store

BASELINE = "static-expert"
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
"""Student t 0.975 quantiles for 1..30 degrees of freedom (standard tables)."""


def t975(df: int) -> float:
    """The two-sided 95% t critical value; past 30 df a Cornish-Fisher expansion of the normal's."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def t_interval(xs: list[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of a 95% t-interval; the bounds are None under two values."""
    if not xs:
        return None, None, None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, None, None
    half = t975(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return m, m - half, m + half


def area(evals: list[dict]) -> float | None:
    """Area under accuracy-by-step (trapezoid), divided by the step range; one point: itself."""
    pts = sorted((e["step"], e["accuracy"]) for e in evals if e.get("accuracy") is not None)
    if not pts:
        return None
    span = pts[-1][0] - pts[0][0]
    if span <= 0:
        return statistics.fmean(a for _, a in pts)
    return sum((x1 - x0) * (a0 + a1) / 2 for (x0, a0), (x1, a1) in zip(pts, pts[1:])) / span


def budget_facts(s: Store) -> dict:
    """One run's cost: wall seconds, training and probe rollouts (for `report.collect`)."""
    run = s.run()
    try:
        wall = (datetime.fromisoformat(run["updated_at"]) - datetime.fromisoformat(run["created_at"])).total_seconds()
    except (TypeError, ValueError):
        wall = None
    return {"wall_s": wall,
            "train_rollouts": s.train_rollout_count(), "probe_rollouts": s.probe_rollout_count()}


def progress_facts(s: Store) -> dict:
    """How far one run got (for `report.collect` and `compare`): its status ("crashed?" for a
    row still marked running whose process is gone), the steps it reached and planned, and
    whether it is complete: finished, with every planned step."""
    from backend.runs import pid_alive

    run = s.run()
    status = run["status"]
    if status in ("running", "paused") and not pid_alive(run["pid"]):
        status = "crashed?"
    steps, total = s.last_step(), run["steps_total"]
    return {"status": status, "steps_done": steps, "steps_total": total,
            "complete": status == "finished" and steps >= (total or 0)}


def incomplete_line(r: dict) -> str:
    """One run that did not finish, in words: `control s1: crashed? at step 37 of 100`."""
    return f"{r['arm']} s{r['seed']}: {r['status']} at step {r['steps_done']} of {r['steps_total']}"


def final_test(r: dict) -> float | None:
    """A run's test accuracy at its latest test evaluation (None: none yet)."""
    return r["test_evals"][-1]["accuracy"] if r["test_evals"] else None


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def arm_stats(arms: dict[str, list[dict]]) -> list[dict]:
    """One row per arm: final test and AUC with intervals, gate counts, budget."""
    rows = []
    for arm, runs in arms.items():
        finals = [f for f in map(final_test, runs) if f is not None]
        aucs = [a for a in (area(r["test_evals"]) for r in runs) if a is not None]
        dead = [statistics.fmean(s["dead_group_frac"] for s in r["steps"] if s["dead_group_frac"] is not None)
                for r in runs if any(s["dead_group_frac"] is not None for s in r["steps"])]
        rows.append({
            "arm": arm, "seeds": len(runs), "final": t_interval(finals), "auc": t_interval(aucs),
            "dead_mean": _mean(dead), "promoted": sum(len(r["promoted"]) for r in runs),
            "repeated": sum(len(r["repeated"]) for r in runs), "blocked": sum(len(r["blocked"]) for r in runs),
            "wall_s_mean": _mean([r.get("wall_s") for r in runs]),
            "wall_s_total": sum(r.get("wall_s") or 0 for r in runs),
            "train_rollouts_mean": _mean([r.get("train_rollouts") for r in runs]),
            "probe_rollouts_mean": _mean([r.get("probe_rollouts") for r in runs]),
            "rollouts_mean": _mean([(r.get("train_rollouts") or 0) + (r.get("probe_rollouts") or 0) for r in runs]),
        })
    return rows


def paired(arms: dict[str, list[dict]], baseline: str = BASELINE) -> list[dict]:
    """Each other arm minus the baseline, paired by seed (seeds only one side has are left out)."""
    base = {r["seed"]: r for r in arms.get(baseline, [])}
    rows = []
    for arm, runs in arms.items():
        if arm == baseline or not base:
            continue
        pairs = [(r, base[r["seed"]]) for r in runs if r["seed"] in base]
        df = [final_test(a) - final_test(b) for a, b in pairs
              if final_test(a) is not None and final_test(b) is not None]
        da = [area(a["test_evals"]) - area(b["test_evals"]) for a, b in pairs
              if a["test_evals"] and b["test_evals"]]
        rows.append({"arm": arm, "pairs": len(df), "final_diff": t_interval(df), "auc_diff": t_interval(da)})
    return rows


def _f(v, f="{:.3f}") -> str:
    return "n/a" if v is None else f.format(v)


def _ci(t: tuple) -> str:
    return "n/a (under 2 seeds)" if t[1] is None else f"[{t[1]:.3f}, {t[2]:.3f}]"


def stats_lines(arms: dict[str, list[dict]], baseline: str = BASELINE) -> list[str]:
    """The report's statistics sections (Markdown)."""
    md = ["## Final test accuracy and area under the test curve", "",
          "Mean over seeds with a 95% Student t-interval. Final: the test evaluation at the latest step. "
          "AUC: the trapezoid area under test accuracy by step, divided by the step range.", "",
          "| arm | seeds | final test | final 95% CI | test AUC | AUC 95% CI | dead-group frac | promotions "
          "| repeated promotions | blocked |", "|---|---|---|---|---|---|---|---|---|---|"]
    stats = arm_stats(arms)
    for t in stats:
        md.append(f"| {t['arm']} | {t['seeds']} | {_f(t['final'][0])} | {_ci(t['final'])} | {_f(t['auc'][0])} | "
                  f"{_ci(t['auc'])} | {_f(t['dead_mean'])} | {t['promoted']} | {t['repeated']} | {t['blocked']} |")
    md += ["", f"## Paired difference against {baseline}", ""]
    rows = paired(arms, baseline)
    if not rows:
        md += [f"- no {baseline} arm among these runs", ""]
    else:
        md += [f"Arm minus {baseline}, paired by seed; 95% Student t-interval over the per-seed differences.", "",
               "| arm | paired seeds | diff final test | 95% CI | diff test AUC | 95% CI |",
               "|---|---|---|---|---|---|"]
        md += [f"| {p['arm']} | {p['pairs']} | {_f(p['final_diff'][0], '{:+.3f}')} | {_ci(p['final_diff'])} | "
               f"{_f(p['auc_diff'][0], '{:+.3f}')} | {_ci(p['auc_diff'])} |" for p in rows]
        md.append("")
    md += ["## Budget", "",
           "Per run, mean over the arm's seeds. Wall: the run's first to last write (model load included). "
           "Rollouts used: training rollouts plus probe rollouts of the evolution stage.", "",
           "| arm | runs | wall s (mean) | wall s (all seeds) | training rollouts | probe rollouts | rollouts used |",
           "|---|---|---|---|---|---|---|"]
    md += [f"| {t['arm']} | {t['seeds']} | {_f(t['wall_s_mean'], '{:.0f}')} | {t['wall_s_total']:.0f} | "
           f"{_f(t['train_rollouts_mean'], '{:.0f}')} | {_f(t['probe_rollouts_mean'], '{:.0f}')} | "
           f"{_f(t['rollouts_mean'], '{:.0f}')} |" for t in stats]
    return md + [""]


def stats_text(arms: dict[str, list[dict]], baseline: str = BASELINE) -> list[str]:
    """The plain-text lines `evotui report` prints (final test with CI, diff vs baseline)."""
    diffs = {p["arm"]: p for p in paired(arms, baseline)}
    out = [f"arm              final test (95% CI)          diff vs {baseline} (95% CI)      rollouts  wall s"]
    for t in arm_stats(arms):
        d = diffs.get(t["arm"])
        diff = f"{_f(d['final_diff'][0], '{:+.3f}')} {_ci(d['final_diff'])}" if d else "-"
        out.append(f"{t['arm']:<16} {_f(t['final'][0])} {_ci(t['final']):<22} {diff:<33} "
                   f"{_f(t['rollouts_mean'], '{:.0f}'):>8}  {_f(t['wall_s_mean'], '{:.0f}')}")
    return out
