"""`evotui report RUN...`: a self-contained Markdown report with SVG plots.

Runs are grouped into arms by their config name (`compare` names them
static / static-expert / coevolve / coevolve-expert / control); several seeds
of an arm are summarised as mean and min-max spread per step, and over seeds
as mean with a 95% t-interval of the final test accuracy and of the area
under the test curve, with each arm's difference from static-expert paired
by seed (report_stats.py), and a budget row per arm (wall time, training
and probe rollouts); held-out outcomes paired over seeds and problems (the
rise over a run, twin against twin, by level, out of distribution:
report_heldout.py). The report shows test accuracy (reported only)
and validation accuracy (what the gate read), each decision's effect, 95%
interval, p-value and sample size, repeated promotions (must be 0), dead-group
fraction and reward-evaluator agreement over steps, the lineage of promoted
interventions with hypotheses and backtests, interventions blocked by
validity diagnostics (with evidence), skills created, and an audit of the
stored held-out completions judged correct (expression echoes and hedges,
which must be 0).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from backend.envs.math_answer import audit
from backend.store import Store, loads

from .report_gate import gate_facts, gate_lines
from .report_heldout import heldout_json, heldout_lines, heldout_text
from .report_invariance import invariance_lines
from .report_population import best_of_n_lines, contrast_lines, contrast_text, lineage_lines, population_json
from .report_search import search_facts, search_lines
from .report_stats import (arm_stats, budget_facts, incomplete_line, paired, progress_facts, stats_lines,
                           stats_text)

COLORS = {"static": "#888888", "coevolve": "#1f77b4", "control": "#ff7f0e", "static-expert": "#2ca02c",
          "coevolve-expert": "#9467bd", "population": "#d62728", "population-copy": "#8c564b",
          "best-of-n": "#17becf"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
"""Colours of series that are not arms (a population's members), in order."""


def _arm(store: Store) -> str:
    cfg = loads(store.run()["config_json"], {})
    return cfg.get("name") or ("coevolve" if cfg.get("evolve", {}).get("enabled") else "static")


def collect(run_dirs: list[Path], groups: list | None = None) -> dict[str, list[dict]]:
    """{arm: [one record per run]}; each of `groups` (several runs a seed: a population, best-of-n;
    report_population.py) adds one record, its reported member's, to its arm."""
    arms: dict[str, list[dict]] = {}
    for d in run_dirs:
        r = collect_run(d)
        arms.setdefault(r["arm"], []).append(r)
    if groups:
        from .report_population import group_record

        for g in groups:
            arms.setdefault(g.arm, []).append(group_record(g, collect_run))
    return arms


def collect_run(d: Path) -> dict:
    """What the report reads of one run."""
    s = Store.open(d, readonly=True)
    try:
        run = s.run()
        return {
            "dir": str(d), "arm": _arm(s), "seed": run["seed"], **progress_facts(s), **gate_facts(s),
            **budget_facts(s), "profile": loads(run["config_json"], {}).get("profile") or "",
            "ood_evals": s.evals("ood"),
            "steps": s.step_series(),
            "promoted": s.promotions_with_backtests(),
            "blocked": s.blocked_by_validity(),
            "interventions": s.count_interventions(),
            "skills": s.skill_summaries(),
            "audit": _audit(s),
            "search": search_facts(s),
        }
    finally:
        s.close()


def _audit(s: Store) -> dict | None:
    """The hack probes over a math run's stored held-out results (None for other domains)."""
    if "math" not in str(loads(s.run()["config_json"], {}).get("domain", "math")):
        return None
    return audit([e for row in s.evals()
                  for e in loads(row["results_json"], []) or [] if isinstance(e, dict)])


def _series(runs: list[dict], table: str, key: str) -> list[tuple[int, float, float, float]]:
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for row in r[table]:
            if row[key] is not None:
                by_step.setdefault(row["step"], []).append(row[key])
    return [(st, statistics.fmean(v), min(v), max(v)) for st, v in sorted(by_step.items())]


def svg_plot(series: dict[str, list[tuple]], title: str, ylabel: str, w: int = 640, h: int = 320) -> str:
    """A line plot (mean) with a shaded min-max band per arm, as standalone SVG."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="40">'
                f'<text x="10" y="25">{title}: no data</text></svg>')
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts) or 1
    y0, y1 = 0.0, max(1.0, max(p[3] for p in pts))
    L, R, T, B = 50, 110, 30, 40
    sx = lambda x: L + (x - x0) / max(x1 - x0, 1) * (w - L - R)  # noqa: E731
    sy = lambda y: h - B - (y - y0) / (y1 - y0) * (h - T - B)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
           f'<line x1="{L}" y1="{h - B}" x2="{w - R}" y2="{h - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{h - B}" stroke="black"/>',
           f'<text x="{(w - R + L) / 2}" y="{h - 8}" text-anchor="middle">step</text>',
           f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">{ylabel}</text>']
    for k in range(5):
        y = y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{L - 5}" y="{sy(y) + 4}" text-anchor="end">{y:.2f}</text>')
        out.append(f'<line x1="{L}" y1="{sy(y)}" x2="{w - R}" y2="{sy(y)}" stroke="#eee"/>')
    for k in range(5):
        x = x0 + (x1 - x0) * k / 4
        out.append(f'<text x="{sx(x)}" y="{h - B + 14}" text-anchor="middle">{x:.0f}</text>')
    for i, (arm, s) in enumerate(series.items()):
        c = COLORS.get(arm, PALETTE[i % len(PALETTE)])
        if len(s) > 1:
            band = ([f"{sx(p[0]):.1f},{sy(p[3]):.1f}" for p in s]
                    + [f"{sx(p[0]):.1f},{sy(p[2]):.1f}" for p in reversed(s)])
            out.append(f'<polygon points="{" ".join(band)}" fill="{c}" fill-opacity="0.15" stroke="none"/>')
        line = " ".join(f"{sx(p[0]):.1f},{sy(p[1]):.1f}" for p in s)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        for p in s:
            out.append(f'<circle cx="{sx(p[0]):.1f}" cy="{sy(p[1]):.1f}" r="2.5" fill="{c}"/>')
        out.append(f'<rect x="{w - R + 10}" y="{T + 18 * i}" width="12" height="3" fill="{c}"/>')
        out.append(f'<text x="{w - R + 26}" y="{T + 18 * i + 5}">{arm}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _flat(text: str) -> str:
    return text.replace("\n", " ").replace("`", "'")


def _fmt(v, f="{:.3f}"):
    return "n/a" if v is None else f.format(v)


def summary_table(arms: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for arm, runs in arms.items():
        finals = [r["test_evals"][-1]["accuracy"] for r in runs if r["test_evals"]]
        starts = [r["test_evals"][0]["accuracy"] for r in runs if r["test_evals"]]
        val = [r["val_evals"][-1]["accuracy"] for r in runs if r["val_evals"]]
        dead = [statistics.fmean([s["dead_group_frac"] for s in r["steps"]]) for r in runs if r["steps"]]
        rows.append({"arm": arm, "seeds": len(runs),
                     "final_mean": statistics.fmean(finals) if finals else None,
                     "final_min": min(finals) if finals else None, "final_max": max(finals) if finals else None,
                     "start_mean": statistics.fmean(starts) if starts else None,
                     "dead_mean": statistics.fmean(dead) if dead else None,
                     "val_final_mean": statistics.fmean(val) if val else None,
                     "promoted": sum(len(r["promoted"]) for r in runs),
                     "repeated": sum(len(r["repeated"]) for r in runs),
                     "inconclusive": sum(d["verdict"] == "inconclusive" for r in runs for d in r["decisions"]),
                     "skipped": sum(len(r["skipped"]) for r in runs),
                     "blocked": sum(len(r["blocked"]) for r in runs)})
    return rows


def counted(arms: dict[str, list[dict]], include_incomplete: bool) -> dict[str, list[dict]]:
    """The runs the means are taken over: complete ones, or every one with `include_incomplete`."""
    return {arm: [r for r in runs if r["complete"] or include_incomplete] for arm, runs in arms.items()}


def incomplete_lines(everything: dict[str, list[dict]], include_incomplete: bool) -> list[str]:
    """The report's section on runs that did not finish all their steps."""
    left = [r for runs in everything.values() for r in runs if not r["complete"]]
    how = ("counted in the means (--include-incomplete)" if include_incomplete
           else "left out of every mean, interval and plot (--include-incomplete counts them)")
    return ["## Incomplete runs", "",
            *([f"Runs that did not finish all their steps, {how}:", ""] if left else []),
            *([f"- **{incomplete_line(r)}** (`{r['dir']}`)" for r in left] or ["- none"]), ""]


def write_report(run_dirs: list[Path], out: Path, include_incomplete: bool = False,
                 groups: list | None = None) -> tuple[Path, str]:
    """Write OUT/report.md and plots; return (path, plain-text summary). Runs that did not finish
    all their steps are listed apart and, unless `include_incomplete`, left out of the means.
    `groups`: arms x seeds with several runs (populations, best-of-n: report_population.py)."""
    groups = groups or []
    everything = collect(run_dirs, groups)
    arms = counted(everything, include_incomplete)
    missing = {arm: sum(not r["complete"] for r in runs) for arm, runs in everything.items()}
    out.mkdir(parents=True, exist_ok=True)
    plots = {
        "test.svg": ("Test accuracy, reported only (mean, min-max over seeds)", "accuracy", "test_evals", "accuracy"),
        "validation.svg": ("Validation accuracy, read by the gate", "accuracy", "val_evals", "accuracy"),
        "dead_groups.svg": ("Dead-group fraction", "fraction", "steps", "dead_group_frac"),
        "agreement.svg": ("Reward-evaluator agreement", "agreement", "steps", "agreement"),
    }
    for fname, (title, ylabel, table, key) in plots.items():
        (out / fname).write_text(svg_plot({a: _series(r, table, key) for a, r in arms.items()}, title, ylabel))
    table = summary_table(arms)
    n_left = sum(missing.values())
    md = ["# evotui report", "", f"Runs: {sum(len(r) for r in everything.values())} in {len(arms)} arm(s)"
          + (f", {n_left} incomplete ({'counted' if include_incomplete else 'not counted'})." if n_left else "."), "",
          "| arm | seeds | test start | test final (mean) | min | max | validation final | mean dead-group frac "
          "| promoted | repeated | inconclusive | skipped (churn) | blocked |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        name = _arm_cell(t["arm"], missing[t["arm"]], include_incomplete)
        md.append(f"| {name} | {t['seeds']} | {_fmt(t['start_mean'])} | {_fmt(t['final_mean'])} | "
                  f"{_fmt(t['final_min'])} | {_fmt(t['final_max'])} | {_fmt(t['val_final_mean'])} | "
                  f"{_fmt(t['dead_mean'])} | {t['promoted']} | {t['repeated']} | {t['inconclusive']} | "
                  f"{t['skipped']} | {t['blocked']} |")
    md += [""] + incomplete_lines(everything, include_incomplete) + stats_lines(arms) + contrast_lines(arms)
    md += heldout_lines(arms)
    profiles = sorted({f"{arm}: {r['profile'] or 'none'}" for arm, runs in arms.items() for r in runs})
    md += ["Profiles (backend/profiles.py): " + "; ".join(profiles), ""]
    md += ["![test](test.svg)", "", "![validation](validation.svg)", "", "![dead groups](dead_groups.svg)", "",
           "![agreement](agreement.svg)", ""]
    md += invariance_lines(arms)
    md += gate_lines(arms)
    md += search_lines(arms)
    md += ["## Promoted interventions (lineage)", ""]
    for arm, runs in arms.items():
        for r in runs:
            for i in r["promoted"]:
                bt = loads(i.get("bt_metrics"), {}) or {}
                keys = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in list(bt.items())[:6])
                md.append(f"- **{arm} s{r['seed']}** #{i['id']} `{i['kind']}` {i['title'] or ''} "
                          f"(status {i['status']}, step {i['promoted_step']}): {i['hypothesis'] or ''} "
                          f"Backtest: {i.get('bt_verdict') or 'n/a'} {keys}")
    md += [""] + lineage_lines(groups, out, svg_plot) + best_of_n_lines(groups, collect_run)
    md += ["## Blocked by validity diagnostics", ""]
    blocked = [(arm, r, i) for arm, runs in arms.items() for r in runs for i in r["blocked"]]
    md += ([f"- **{arm} s{r['seed']}** #{i['id']} {i['title'] or ''}: {i['reason']}" for arm, r, i in blocked]
           or ["- none"])
    md += ["", "## Skills created", ""]
    skills = [(arm, sk) for arm, runs in arms.items() for r in runs for sk in r["skills"]]
    md += ([f"- **{arm}** {sk['name']} ({sk['domain']}): trigger {sk['trigger_json']}" for arm, sk in skills]
           or ["- none"])
    md += ["", "## Evaluator audit: correct held-out verdicts that were echoes or hedges", "",
           "Each stored held-out completion the evaluator judged correct, checked by the hack probes "
           "(backend/envs/math_answer.py): an unevaluated expression of the question's operands, or "
           "several candidate answers. Both counts must be 0. Every run is audited, finished or not.", ""]
    for arm, runs in everything.items():
        for r in runs:
            a = r["audit"]
            if a is None:
                md.append(f"- **{arm} s{r['seed']}**: not a math run")
                continue
            unchecked = f" ({a['unchecked']} stored without completions)" if a["unchecked"] else ""
            md.append(f"- **{arm} s{r['seed']}**: {a['checked']} correct verdicts checked{unchecked}: "
                      f"{a['echo']} expression echoes, {a['hedged']} hedges"
                      + "".join(f"; e.g. {x['task_id']}: `{_flat(x['tail'][-60:])}`" for x in a["examples"][:2]))
    md += ["", "## Runs", ""] + [f"- {arm}: `{r['dir']}` ({r['status']}, step {r['steps_done']} of {r['steps_total']})"
                                 for arm, runs in everything.items() for r in runs]
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    extra = {t["arm"]: t for t in arm_stats(arms)}
    diffs = {d["arm"]: d for d in paired(arms)}
    pops = population_json(arms)
    held = heldout_json(arms)
    rows = [dict(t, stats=extra[t["arm"]], vs_static_expert=diffs.get(t["arm"]), incomplete=missing[t["arm"]],
                 heldout=held[t["arm"]], **pops[t["arm"]]) for t in table]
    (out / "report.json").write_text(json.dumps(rows, indent=2))
    names = {t["arm"]: _arm_cell(t["arm"], missing[t["arm"]], include_incomplete) for t in table}
    width = max([15, *map(len, names.values())])  # `coevolve-expert`: the longest arm name
    text = [f"{'arm':<{width}} seeds  test start  final  (min-max)        val    dead   promoted repeated blocked"]
    for t in table:
        text.append(f"{names[t['arm']]:<{width}} {t['seeds']:>5}  {_fmt(t['start_mean'])}       "
                    f"{_fmt(t['final_mean'])}  "
                    f"({_fmt(t['final_min'])}-{_fmt(t['final_max'])})  {_fmt(t['val_final_mean'])}  "
                    f"{_fmt(t['dead_mean'], '{:.2f}')}  {t['promoted']:>8} {t['repeated']:>8} {t['blocked']:>7}")
    left = [f"INCOMPLETE {incomplete_line(r)}" + ("" if include_incomplete else " (not counted)")
            for runs in everything.values() for r in runs if not r["complete"]]
    pop, paired_text = contrast_text(arms), heldout_text(arms)
    return path, "\n".join(text + [""] + stats_text(arms) + ([""] + pop if pop else [])
                           + ([""] + paired_text if paired_text else []) + ([""] + left if left else []))


def _arm_cell(arm: str, missing: int, included: bool) -> str:
    """The arm's name, marked when some of its runs did not finish: `control (1 incomplete, not counted)`."""
    mark = f" ({missing} incomplete, {'counted' if included else 'not counted'})" if missing else ""
    return f"{arm}{mark}"
