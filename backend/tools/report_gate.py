"""What `evotui report` says about the gate: both held-out sets, every decision's statistics,
repeated promotions (must be 0), churn skips, test accuracy against the static arm, and co-evolution
against its budget-matched control.

`gate_facts(store)` reads one run (old runs included: columns a migration
added are asked for only where they exist); `gate_lines(arms)` writes the
report's gate sections; `test_vs(arms)` pairs each arm's final test outcomes
with the static arm's, problem by problem and seed by seed; `against_twins(arms)`
pairs each evolving arm with its static twin at every test evaluation, which
shows whether its promotions helped on the test set.
"""

from __future__ import annotations

from backend.evolve.interventions import change_of, normalise
from backend.evolve.space import NO_EFFECT, changed_nothing
from backend.evolve.stats import paired_binary
from backend.store import loads
from backend.tools.report_invariance import alters_training, twin_pairs
from backend.tools.report_stats import final_test


def repeated_promotions(s) -> list[dict]:
    """Promotions that re-applied a change this run had promoted before, or whose harness
    equals an earlier version: {"id", "title", "why"}."""
    seen_changes: dict[tuple, int] = {}
    out = []
    for r in s.promoted_changes():
        for name in (loads(r["params_json"], {}) or {}).get("names") or []:
            ch = change_of(r["code"], name)
            if ch in seen_changes:
                out.append({"id": r["id"], "title": r["title"], "why": f"same change as #{seen_changes[ch]}"})
            seen_changes.setdefault(ch, r["id"])
    versions: dict[str, int] = {}
    for v in s.harness_versions():
        norm = normalise(v["code"])
        if v["intervention_id"] and norm in versions and v["intervention_id"] not in {o["id"] for o in out}:
            out.append({"id": v["intervention_id"], "title": "", "why": f"same harness as v{versions[norm]}"})
        versions.setdefault(norm, v["id"])
    return out


def gate_facts(s) -> dict:
    """The gate's record of one run (for `report.collect`)."""
    skipped = [dict(x, step=r["step"]) for r in s.round_skips() for x in loads(r["skipped_json"], []) or []]
    return {"val_evals": s.evals("validation"), "test_evals": s.evals("test"), "decisions": s.backtest_decisions(),
            "repeated": repeated_promotions(s), "skipped": skipped}


def test_vs(arms: dict[str, list[dict]], baseline: str = "static") -> dict[str, object]:
    """{arm: stats.Effect}: final test accuracy minus the baseline arm's, paired over
    (seed, test problem); seeds or problems only one side has are left out."""
    base = {r["seed"]: r for r in arms.get(baseline, [])}
    out = {}
    for arm, runs in arms.items():
        if arm == baseline:
            continue
        a, b = [], []
        for r in runs:
            other = base.get(r["seed"])
            if not other or not r["test_evals"] or not other["test_evals"]:
                continue
            mine, theirs = _verdicts(r["test_evals"][-1]), _verdicts(other["test_evals"][-1])
            for k in sorted(set(mine) & set(theirs)):
                a.append(theirs[k])
                b.append(mine[k])
        if a:
            out[arm] = paired_binary(a, b, metric=f"test accuracy, {arm} - {baseline}")
    return out


def named_contrasts(arms: dict[str, list[dict]], pairs) -> dict[str, object]:
    """{"arm - base": stats.Effect} of `test_vs` for each (arm, base) of `pairs` whose two arms ran."""
    out = {}
    for arm, base in pairs:
        if arm in arms and base in arms:
            e = test_vs({arm: arms[arm], base: arms[base]}, baseline=base).get(arm)
            if e is not None:
                out[f"{arm} - {base}"] = e
    return out


def _effect_line(arm: str, e) -> str:
    return (f"- **{arm}**: {e.effect:+.3f}, 95% CI [{e.ci_low:+.3f}, {e.ci_high:+.3f}], p {e.p_value:.3g}, "
            f"{e.n} paired problems")


def control_lines(arms: dict[str, list[dict]]) -> list[str]:
    """coevolve against its budget-matched control: does the search beat spending its rollouts on
    training the same starting harness? Both arms' final test outcomes, paired over seeds and
    problems, and the per-seed differences."""
    if "coevolve" not in arms or "control" not in arms:
        return []
    e = test_vs({"coevolve": arms["coevolve"], "control": arms["control"]}, baseline="control").get("coevolve")
    control = {r["seed"]: final_test(r) for r in arms["control"]}
    mine = {r["seed"]: final_test(r) for r in arms["coevolve"]}
    diffs = [(seed, a - b) for seed, a in sorted(mine.items()) if a is not None and (b := control.get(seed)) is not None]
    md = ["## Co-evolution against its budget-matched control", "",
          "The control trains the static default harness on as many rollouts as the same seed's coevolve run "
          "used in all (training plus search). Final test accuracy, coevolve minus control, paired over seeds "
          "and test problems (exact McNemar, Newcombe 95% interval).", ""]
    md.append(_effect_line("coevolve - control", e) if e else "- no seed with both arms' test results")
    if diffs:
        md.append("- per seed: " + ", ".join(f"s{seed} {d:+.3f}" for seed, d in diffs))
    return md + [""]


def _verdicts(evaluation: dict) -> dict:
    """{problem: correct} of one stored held-out evaluation."""
    return {x["task_id"]: bool(x["correct"]) for x in loads(evaluation.get("results_json"), []) or []}


def _outcomes(run: dict, step: int) -> dict:
    """{test problem: correct} of `run`'s test evaluation at `step` (empty: none there)."""
    return next((_verdicts(e) for e in run["test_evals"] if e["step"] == step), {})


def against_twins(arms: dict[str, list[dict]]) -> list[dict]:
    """Each evolving arm minus its static twin (`report_invariance.twin_pairs`) at every test evaluation
    both ran, paired over (seed, test problem): {arm, twin, step, runs, changed, effect}. `changed`:
    the runs that had promoted a change that alters training before that step. Until then a run
    trains as its twin (the invariance check), so the difference shows what its promotions did."""
    out = []
    for arm, twin, pairs in twin_pairs(arms):
        steps = sorted({e["step"] for r, t in pairs for e in r["test_evals"]}
                       & {e["step"] for r, t in pairs for e in t["test_evals"]})
        for step in steps:
            a, b, runs, changed = [], [], 0, 0
            for r, t in pairs:
                mine, theirs = _outcomes(r, step), _outcomes(t, step)
                shared = sorted(set(mine) & set(theirs))
                if not shared:
                    continue
                runs += 1
                changed += any(alters_training(p) and (p["promoted_step"] or 0) < step for p in r["promoted"])
                a += [theirs[k] for k in shared]
                b += [mine[k] for k in shared]
            if a:
                out.append({"arm": arm, "twin": twin, "step": step, "runs": runs, "changed": changed,
                            "effect": paired_binary(a, b, metric=f"test accuracy, {arm} - {twin}")})
    return out


def twin_lines(arms: dict[str, list[dict]]) -> list[str]:
    """The section on whether the promotions helped on the test set (nothing without twins)."""
    rows = against_twins(arms)
    if not rows:
        return []
    md = ["## Did the promotions help on the test set?", "",
          "Each evolving arm minus its static twin (the same seeds and starting harness) at every test "
          "evaluation, paired over seeds and test problems: exact McNemar p-value, Newcombe 95% interval. "
          "Changed: the runs that had promoted a change that alters training (not only a diagnostic) "
          "before that step; until then a run trains as its twin.", "",
          "| arm - twin | step | runs | changed | difference | 95% CI | p | n |", "|---|---|---|---|---|---|---|---|"]
    for x in rows:
        e = x["effect"]
        md.append(f"| {x['arm']} - {x['twin']} | {x['step']} | {x['runs']} | {x['changed']} | {e.effect:+.3f} | "
                  f"[{e.ci_low:+.3f}, {e.ci_high:+.3f}] | {e.p_value:.3g} | {e.n} |")
    return md + [""]


def _num(v, spec: str = "+.3f") -> str:
    return "–" if v is None else format(v, spec)


def _notes(d: dict) -> str:
    """What a decision's verdict leaves unsaid: too small a sample, or a change that did nothing the
    gate can see (training's update unchanged, or an interval hugging 0: `space.changed_nothing`)."""
    nothing = changed_nothing(d["verdict"], d)
    notes = [why for flag, why in ((d.get("underpowered"), "underpowered"),
                                   (d.get("same_update"), "update unchanged"),
                                   (nothing and not d.get("same_update"), "nothing seen")) if flag]
    return f" ({', '.join(notes)})" if notes else ""


def gate_lines(arms: dict[str, list[dict]]) -> list[str]:
    """The report's gate sections, as Markdown lines."""
    md = ["## Test accuracy against the static harness", "",
          "Final test accuracy (the test set is reported only: nothing in the loop reads it), paired over "
          "seeds and test problems; exact McNemar p-value, Newcombe 95% interval.", ""]
    vs = test_vs(arms)
    md += [_effect_line(arm, e) for arm, e in vs.items()] or ["- no static arm with test results to pair with"]
    md += [""] + control_lines(arms) + twin_lines(arms)
    md += ["## Decisions", "",
           "Every backtest's decision on the metric its change targets: effect (candidate minus incumbent), "
           "95% interval, p-value, paired sample size. `passed` needs the lower bound above `evolve.min_gain`; "
           "`inconclusive` is never auto-promoted; `update unchanged`: the replayed candidate trained the same "
           "rollouts with the same advantages as the incumbent; `nothing seen`: its interval lies within "
           f"{NO_EFFECT} of 0 (after either, the proposer moves that knob farther).", "",
           "| run | # | change | mode | decision | metric | effect | 95% CI | p | n |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    rows = 0
    for arm, runs in arms.items():
        for r in runs:
            for d in r["decisions"]:
                if d["effect"] is None and d["verdict"] != "inconclusive":
                    continue  # decided before statistics were stored
                rows += 1
                ci = f"[{_num(d['ci_low'])}, {_num(d['ci_high'])}]" if d["effect"] is not None else "–"
                md.append(f"| {arm} s{r['seed']} | {d['id']} | {(d['title'] or '')[:40]} | {d['mode']} | "
                          f"{d['verdict']}{_notes(d)} | {d['metric'] or ''} | "
                          f"{_num(d['effect'])} | {ci} | {_num(d['p_value'], '.3g')} | {_num(d['n'], 'd')} |")
    if not rows:
        md.append("| – | | no decision with statistics yet | | | | | | | |")
    md += ["", "## Repeated promotions (must be 0)", ""]
    reps = [(arm, r, x) for arm, runs in arms.items() for r in runs for x in r["repeated"]]
    md += [f"- **{arm} s{r['seed']}** #{x['id']} {x['title']}: {x['why']}" for arm, r, x in reps] or ["- 0"]
    md += ["", "## Skipped as churn", ""]
    skips = [(arm, r, x) for arm, runs in arms.items() for r in runs for x in r["skipped"]]
    md += [f"- **{arm} s{r['seed']}** step {x['step']}: {x['title']}: {x['reason']}" for arm, r, x in skips[:50]] \
        or ["- none"]
    if len(skips) > 50:
        md.append(f"- ... and {len(skips) - 50} more")
    return md + [""]
