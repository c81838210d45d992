"""What `evotui report` says about the held-out sets, paired over problems.

Seed-level means (report_stats.py) have as many units as seeds; pairing the
same problem of the same seed at two evaluations, or in two arms, has as many
units as seeds times problems. This section gives, pooled over seeds and
paired by (seed, task_id), with an exact McNemar p-value and a Newcombe 95%
interval (`stats.paired_binary`):

1. each arm's rise of test accuracy from its first test evaluation (step 0)
   to its last;
2. the twin contrasts at the final test evaluation: coevolve - static,
   coevolve-expert - static-expert, static-expert - static (`report_gate.test_vs`);
3. each arm's test accuracy by task level at the start and at the end, each
   with a 95% Wilson interval, and the paired rise per level (only when the
   stored results carry a "level");
4. the out-of-distribution set ('ood' evaluations, e.g. HumanEval beside
   generated code tasks): start and final accuracy and the paired rise
   (only when some run evaluated it).

Runs without test evaluations are left out; a run with a single evaluation
of a set has no rise on it.

    >>> rise([{"seed": 0, "test_evals": [{"results_json": '[{"task_id": "a", "correct": false}]'},
    ...                                  {"results_json": '[{"task_id": "a", "correct": true}]'}]}]).effect
    1.0
"""

from __future__ import annotations

from backend.evolve.stats import Effect, EffectRecord, paired_binary, wilson_interval
from backend.store import loads

from .report_gate import _effect_line, _verdicts, named_contrasts

CONTRASTS = (("coevolve", "static"), ("coevolve-expert", "static-expert"), ("static-expert", "static"))
"""(arm, baseline) pairs compared at the final test evaluation."""
NO_LEVEL = "-"
"""The level cell of problems stored without one."""


def _pairs(runs: list[dict], key: str) -> list[tuple[dict, dict]]:
    """(first, last) evaluation of `key` ("test_evals", "ood_evals") of every run with two or more."""
    return [(r[key][0], r[key][-1]) for r in runs if len(r.get(key) or []) > 1]


def _shared(first: dict, last: dict) -> list[tuple[str, bool, bool]]:
    """(task_id, before, after) of the problems both evaluations hold, in task order."""
    old, new = _verdicts(first), _verdicts(last)
    return [(k, old[k], new[k]) for k in sorted(set(old) & set(new))]


def _paired(pairs: list[tuple[dict, dict]]) -> tuple[list[bool], list[bool]]:
    """Outcomes (before, after) of the problems both evaluations of a pair hold, pair after pair."""
    rows = [(x, y) for first, last in pairs for _, x, y in _shared(first, last)]
    return [x for x, _ in rows], [y for _, y in rows]


def rise(runs: list[dict], key: str = "test_evals", label: str = "test accuracy") -> Effect | None:
    """Last minus first evaluation of `key`, paired over (seed, task_id); None without pairs."""
    a, b = _paired(_pairs(runs, key))
    return paired_binary(a, b, metric=f"{label}, last - first") if a else None


def twin_contrasts(arms: dict[str, list[dict]]) -> dict[str, Effect]:
    """{"coevolve - static": Effect, ...} at the final test evaluation, for the pairs both of whose arms ran."""
    return named_contrasts(arms, CONTRASTS)


def _levels(evaluation: dict) -> dict[str, object]:
    """{task_id: level} of one stored evaluation (level None where the row has none)."""
    return {x["task_id"]: x.get("level") for x in loads(evaluation.get("results_json"), []) or []
            if isinstance(x, dict) and "task_id" in x}


def _share(verdicts: list[bool]) -> dict | None:
    """{acc, low, high, k, n}: a pooled accuracy with its 95% Wilson interval (None when empty)."""
    if not verdicts:
        return None
    k, n = sum(verdicts), len(verdicts)
    lo, hi = wilson_interval(k, n)
    return {"acc": k / n, "low": lo, "high": hi, "k": k, "n": n}


def _pooled(evaluations: list[dict], level=None, any_level: bool = True) -> dict | None:
    """Accuracy pooled over `evaluations` (one a run), of one level unless `any_level`."""
    out = []
    for e in evaluations:
        levels = _levels(e)
        out += [ok for t, ok in _verdicts(e).items() if any_level or levels.get(t) == level]
    return _share(out)


def _level_order(level) -> tuple:
    return (level is None, str(type(level)), level if level is not None else 0)


def by_level(runs: list[dict]) -> list[dict]:
    """Per test level (ints, then problems without one): {level, start, final, rise}; [] when no
    stored test result carries a level. start and final: `_share` of the first and last test
    evaluations pooled over seeds; rise: paired over (seed, task_id)."""
    tested = [r for r in runs if r["test_evals"]]
    firsts, lasts = [r["test_evals"][0] for r in tested], [r["test_evals"][-1] for r in tested]
    levels_of = [_levels(e) for e in firsts + lasts]
    found = {lv for m in levels_of for lv in m.values()}
    if found <= {None}:
        return []
    pairs = _pairs(tested, "test_evals")
    paired: dict[object, tuple[list[bool], list[bool]]] = {level: ([], []) for level in found}
    for first, last in pairs:
        level_of = {**_levels(first), **_levels(last)}
        for task_id, x, y in _shared(first, last):
            before, after = paired[level_of.get(task_id)]
            before.append(x)
            after.append(y)
    rows = []
    for level in sorted(found, key=_level_order):
        a, b = paired[level]
        rows.append({"level": level, "start": _pooled(firsts, level, False), "final": _pooled(lasts, level, False),
                     "rise": paired_binary(a, b, metric=f"test accuracy, level {level}, last - first") if a else None})
    return rows


def ood(runs: list[dict]) -> dict | None:
    """{start, final, rise} of the 'ood' evaluations pooled over seeds; None when no run has one."""
    evaluated = [r for r in runs if r["test_evals"] and r.get("ood_evals")]
    if not evaluated:
        return None
    return {"start": _pooled([r["ood_evals"][0] for r in evaluated]),
            "final": _pooled([r["ood_evals"][-1] for r in evaluated]),
            "rise": rise(evaluated, "ood_evals", "ood accuracy")}


# ------------------------------------------------------------------ report.json
def heldout_json(arms: dict[str, list[dict]]) -> dict[str, dict]:
    """Per arm, for report.json rows: {test_rise, vs_<baseline> (twin contrasts led by this arm),
    by_level, ood}; an effect as `Effect.record()`, an accuracy as `_share`."""
    diffs = twin_contrasts(arms)
    out = {}
    for arm, runs in arms.items():
        levels = [{"level": x["level"], "start": x["start"], "final": x["final"], "rise": _record(x["rise"])}
                  for x in by_level(runs)]
        o = ood(runs)
        out[arm] = {"test_rise": _record(rise(runs)),
                    **{f"vs_{b.replace('-', '_')}": diffs[f"{a} - {b}"].record()
                       for a, b in CONTRASTS if a == arm and f"{a} - {b}" in diffs},
                    "by_level": levels, "ood": dict(o, rise=_record(o["rise"])) if o else None}
    return out


def _record(e: Effect | None) -> EffectRecord | None:
    return e.record() if e is not None else None


# ------------------------------------------------------------------ Markdown and text
def _acc(s: dict | None) -> str:
    return f"{s['acc']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | {s['n']}" if s else "n/a | 0"


def _eff(e: Effect | None) -> str:
    return f"{e.effect:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}] | {e.p_value:.3g} | {e.n}" if e else "n/a | | 0"


def heldout_lines(arms: dict[str, list[dict]]) -> list[str]:
    """The report's section, as Markdown lines."""
    md = ["## Held-out results paired over problems", "",
          "Pooled over seeds and problems and paired by (seed, task_id): exact McNemar p-value, Newcombe 95% "
          "interval; single accuracies with a 95% Wilson interval. Rise: a run's last test evaluation minus its "
          "first (step 0).", "",
          "| arm | runs | test rise | 95% CI | p | n |", "|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        e = rise(runs)
        cell = f"{e.effect:+.3f} | [{e.ci_low:+.3f}, {e.ci_high:+.3f}] | {e.p_value:.3g} | {e.n}" if e else \
            "n/a | | | 0"
        md.append(f"| {arm} | {len(_pairs(runs, 'test_evals'))} | {cell} |")
    md += ["", "Final test accuracy, twin against twin:", ""]
    md += [_effect_line(name, e) for name, e in twin_contrasts(arms).items()] or \
        ["- no pair of twin arms with test results to pair"]
    md += [""] + _level_table(arms) + _ood_table(arms)
    return md


def _level_table(arms: dict[str, list[dict]]) -> list[str]:
    rows = [(arm, x) for arm, runs in arms.items() for x in by_level(runs)]
    if not rows:
        return []
    md = ["Test accuracy by level:", "",
          "| arm | level | start [95% CI] | n | final [95% CI] | n | rise [95% CI] | p | n paired |",
          "|---|---|---|---|---|---|---|---|---|"]
    for arm, x in rows:
        level = NO_LEVEL if x["level"] is None else x["level"]
        md.append(f"| {arm} | {level} | {_acc(x['start'])} | {_acc(x['final'])} | {_eff(x['rise'])} |")
    return md + [""]


def _ood_table(arms: dict[str, list[dict]]) -> list[str]:
    rows = [(arm, o) for arm, runs in arms.items() if (o := ood(runs))]
    if not rows:
        return []
    md = ["Out-of-distribution test ('ood' evaluations):", "",
          "| arm | start [95% CI] | n | final [95% CI] | n | rise [95% CI] | p | n paired |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {arm} | {_acc(o['start'])} | {_acc(o['final'])} | {_eff(o['rise'])} |" for arm, o in rows]
    return md + [""]


def heldout_text(arms: dict[str, list[dict]]) -> list[str]:
    """The plain-text lines `evotui report` prints: rises, twin contrasts, levels and ood."""
    out = []
    for arm, runs in arms.items():
        o = ood(runs)
        for name, e in ((f"{arm} test rise", rise(runs)), (f"{arm} ood rise", o["rise"] if o else None)):
            if e is not None:
                out.append(f"{name:<44} {_short(e)}")
        levels = by_level(runs)
        if levels:
            out.append(f"{arm} test by level (start -> final): " + ", ".join(
                f"L{NO_LEVEL if x['level'] is None else x['level']} {_a(x['start'])} -> {_a(x['final'])}"
                f" n {x['final']['n'] if x['final'] else 0}" for x in levels))
    out += [f"{name + ' (final test)':<44} {_short(e)}" for name, e in twin_contrasts(arms).items()]
    return (["held-out, paired over (seed, problem)"] + out) if out else []


def _short(e: Effect) -> str:
    return f"{e.effect:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}] p {e.p_value:.3g} n {e.n}"


def _a(s: dict | None) -> str:
    return f"{s['acc']:.3f}" if s else "n/a"
