"""What `evotui report` says about arms with several runs a seed: populations and best-of-N.

A `Group` is one arm x seed of them: a population directory (POP, its members
`mI`), or best-of-n's folder of N static runs (`rI`). Each counts in the
report as one run of its arm, its reported member's (chosen on validation:
a population's best member at its last comparison, best-of-n's run with the
highest validation accuracy at its last evaluation; never on test), with the
rollouts of all its runs (training plus search: probes, trials and replay
in rollouts, `evolve.budget.search_budget`). So every section of the report
pairs it with the other arms by seed as it pairs single runs.

Sections added here: the population arms against their baselines at equal
rollouts (population minus best-of-n, population minus population-copy, final
test outcomes of the reported members paired over seeds and test problems:
`report_gate.test_vs`, exact McNemar, Newcombe 95% interval), and each
population's lineage: members with their harness versions and latest
validation, a validation curve per member, and every copy and move with the
evidence that decided it and its outcome.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backend.evolve.stats import wilson_interval
from backend.population.store import PopulationStore
from backend.store import Store

from .compare_population import GROUP_ARMS, MODES
from .population_view import PopulationView, read_population
from .report_gate import _effect_line, _verdicts, named_contrasts

FINISHED = ("finished", "done")
"""A population's status once it ran every step (the coordinator writes `finished`)."""
CONTRASTS = (("population", "best-of-n"), ("population", "population-copy"))
"""(arm, baseline): the population against best-of-N static and against selection alone."""


@dataclass(frozen=True)
class Group:
    """One arm x seed with several runs."""

    arm: str
    seed: int
    dir: Path
    members: tuple[Path, ...]
    """Every run directory of the group (those not started yet included)."""

    @property
    def population(self) -> bool:
        return self.arm in MODES


def groups_in(folder: Path) -> list[Group]:
    """The groups of a compare folder: OUT/population-sS, OUT/population-copy-sS, OUT/best-of-n-sS."""
    out = []
    for d in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        arm, _, seed = d.name.rpartition("-s")
        if arm not in GROUP_ARMS or not seed.isdigit():
            continue
        if arm in MODES and PopulationStore.exists(d):
            out.append(population_group(d, arm, int(seed)))
        elif arm == "best-of-n":
            runs = tuple(sorted((r for r in d.iterdir() if (r / "run.db").is_file()), key=_member_index))
            if runs:
                out.append(Group(arm, int(seed), d, runs))
    return out


def population_group(pop_dir: Path, arm: str | None = None, seed: int | None = None) -> Group:
    """A population directory as a group; its arm from its mode (`evotui report POP`)."""
    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        pop, members = ps.population(), ps.members()
    finally:
        ps.close()
    arm = arm or next(a for a, mode in MODES.items() if mode == pop.mode)
    return Group(arm, pop.seed if seed is None else seed, Path(pop_dir),
                 tuple(Path(pop_dir) / m.run_dir for m in members))


def _member_index(d: Path) -> int:
    digits = d.name.lstrip("rm")
    return int(digits) if digits.isdigit() else 0


def population_finished(pop_dir: Path) -> bool:
    """The population ran every step (its coordinator marked it finished)."""
    if not PopulationStore.exists(pop_dir):
        return False
    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        return ps.population().status in FINISHED
    finally:
        ps.close()


def rollouts_of(run_dir: Path) -> tuple[int, int]:
    """(training rollouts, search rollouts) of one run: probes, trials and replay in rollouts."""
    from backend.evolve.budget import search_budget

    s = Store.open(run_dir, readonly=True)
    try:
        b = search_budget(s)
        return int(b["train_rollouts"]), math.ceil(b["search_rollouts"])
    finally:
        s.close()


def _last_val(r: dict) -> float | None:
    return r["val_evals"][-1]["accuracy"] if r["val_evals"] else None


def reported_index(records: list[dict | None], view: PopulationView | None = None) -> int | None:
    """The member reported on test: a population's best at its last comparison (`view`, its
    store's scores), else (best-of-n, or no comparison yet) the highest last validation accuracy,
    the lowest index on a tie. Never chosen on test."""
    best = view.reported if view is not None else None
    if best is not None and best < len(records) and records[best] is not None:
        return best
    vals = [(v, -i) for i, r in enumerate(records) if r is not None and (v := _last_val(r)) is not None]
    if vals:
        return -max(vals)[1]
    return next((i for i, r in enumerate(records) if r is not None), None)


def group_record(g: Group, collect_run: Callable[[Path], dict]) -> dict:
    """The group as one run of its arm: its reported member's record (test and validation curves,
    steps), with every member's rollouts and decisions, complete when every run is."""
    records = [collect_run(m) if (m / "run.db").is_file() else None for m in g.members]
    view = read_population(g.dir) if g.population else None
    rep = reported_index(records, view)
    done = [r for r in records if r is not None]
    base = dict(records[rep]) if rep is not None else _empty(g)
    spent = [rollouts_of(m) for m in g.members if (m / "run.db").is_file()]
    status, complete = _group_status(records, view)
    base.update(
        arm=g.arm, seed=g.seed, dir=str(g.dir), member=rep, members=len(g.members), status=status,
        complete=complete, steps_done=min((r["steps_done"] for r in done), default=0),
        steps_total=view.population.steps_total if view else max((r["steps_total"] or 0 for r in done), default=None),
        wall_s=sum(r.get("wall_s") or 0 for r in done), train_rollouts=sum(t for t, _ in spent),
        probe_rollouts=sum(r.get("probe_rollouts") or 0 for r in done), search_rollouts=sum(x for _, x in spent),
        rollouts_used=sum(t + x for t, x in spent),
        **{k: [x for r in done for x in r[k]] for k in ("promoted", "blocked", "skills", "decisions", "repeated",
                                                        "skipped")})
    return base


def _empty(g: Group) -> dict:
    return {"dir": str(g.dir), "profile": "", "test_evals": [], "val_evals": [], "steps": [], "promoted": [],
            "blocked": [], "skills": [], "decisions": [], "repeated": [], "skipped": [], "audit": None,
            "search": {}, "interventions": 0}


def _group_status(records: list[dict | None], view: PopulationView | None) -> tuple[str, bool]:
    """(status, complete): a population's own status (finished: complete); best-of-n is finished
    when every run is complete, else the first unfinished run's status."""
    if view is not None:
        status = view.population.status
        return ("finished" if status in FINISHED else status), status in FINISHED
    left = [r for r in records if r is None or not r["complete"]]
    if not left:
        return "finished", True
    return (left[0]["status"] if left[0] is not None else "not started"), False


def test_interval(r: dict) -> dict | None:
    """A run's final test accuracy: {acc, low, high, n} (95% Wilson); None without per-problem results."""
    if not r["test_evals"]:
        return None
    v = _verdicts(r["test_evals"][-1])
    if not v:
        return None
    lo, hi = wilson_interval(sum(v.values()), len(v))
    return {"acc": sum(v.values()) / len(v), "low": lo, "high": hi, "n": len(v)}


# ------------------------------------------------------------------ report sections
def pooled_test(runs: list[dict]) -> dict | None:
    """An arm's final test accuracy pooled over its seeds' (reported) runs: {acc, low, high, n}."""
    verdicts = [x for r in runs if r["test_evals"] for x in _verdicts(r["test_evals"][-1]).values()]
    if not verdicts:
        return None
    lo, hi = wilson_interval(sum(verdicts), len(verdicts))
    return {"acc": sum(verdicts) / len(verdicts), "low": lo, "high": hi, "n": len(verdicts)}


def contrasts(arms: dict[str, list[dict]]) -> dict[str, object]:
    """{"population - best-of-n": stats.Effect, ...} for the contrasts both of whose arms ran."""
    return named_contrasts(arms, CONTRASTS)


def population_json(arms: dict[str, list[dict]]) -> dict[str, dict]:
    """Per arm, for report.json: pooled test accuracy with its interval, rollouts used (mean over
    seeds; training plus search), and the population's paired differences."""
    diffs = contrasts(arms)
    out = {}
    for arm, runs in arms.items():
        used = [r["rollouts_used"] if "rollouts_used" in r else
                (r.get("train_rollouts") or 0) + (r.get("probe_rollouts") or 0) for r in runs]
        out[arm] = {"reported_test": pooled_test(runs), "rollouts_used_mean": statistics.fmean(used) if used else None,
                    **{f"vs_{b.replace('-', '_')}": _effect_json(diffs[f"{a} - {b}"])
                       for a, b in CONTRASTS if a == arm and f"{a} - {b}" in diffs}}
    return out


def _effect_json(e) -> dict:
    return {k: getattr(e, k) for k in ("metric", "effect", "ci_low", "ci_high", "p_value", "n", "test")}


def contrast_lines(arms: dict[str, list[dict]]) -> list[str]:
    """The section on the population against its baselines (nothing without population arms)."""
    if not any(a in arms for a in GROUP_ARMS):
        return []
    md = ["## Population against best-of-N static and selection alone", "",
          "Each seed of a population arm is one population; best-of-n is N static runs seeded as its members. "
          "Reported: the member best on validation (a population's best at its last comparison; best-of-n's "
          "highest last validation accuracy), on test. Rollouts used: every run of the group, training plus "
          "search (probes, trials, replay in rollouts). Final test accuracy pooled over seeds and test "
          "problems (95% Wilson); differences paired over seeds and test problems (exact McNemar, Newcombe "
          "95% interval).", "",
          "| arm | seeds | runs a seed | reported test | 95% CI | n | rollouts used (mean a seed) |",
          "|---|---|---|---|---|---|---|"]
    info = population_json(arms)
    for arm, runs in arms.items():
        t = info[arm]["reported_test"]
        cell = f"{t['acc']:.3f} | [{t['low']:.3f}, {t['high']:.3f}] | {t['n']}" if t else "n/a | | 0"
        size = max((r.get("members") or 1 for r in runs), default=1)
        md.append(f"| {arm} | {len(runs)} | {size} | {cell} | {info[arm]['rollouts_used_mean'] or 0:.0f} |")
    md.append("")
    diffs = contrasts(arms)
    md += [_effect_line(name, e) for name, e in diffs.items()] or \
        ["- no population arm with a baseline arm's test results to pair with"]
    return md + [""]


def contrast_text(arms: dict[str, list[dict]]) -> list[str]:
    """The plain-text lines `evotui report` prints for them."""
    diffs = contrasts(arms)
    return [f"{name:<30} {e.effect:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}] p {e.p_value:.3g} n {e.n}"
            for name, e in diffs.items()]


def lineage_lines(groups: list[Group], out: Path, svg_plot: Callable[..., str]) -> list[str]:
    """Each population's lineage (members, curves, copies and moves), its plot (`svg_plot`, as the
    report's other plots) written to OUT."""
    pops = [g for g in groups if g.population]
    if not pops:
        return []
    md = ["## Population lineage", ""]
    for g in pops:
        view = read_population(g.dir)
        name = f"{g.arm}-s{g.seed}"
        series = {m.name: [(x, y, y, y) for x, y in m.curve] for m in view.members}
        (out / f"lineage-{name}.svg").write_text(svg_plot(series, f"{name}: validation accuracy by member",
                                                          "accuracy"))
        md += population_lines(view, name) + [f"![{name} validation](lineage-{name}.svg)", ""]
        md += dead_group_lines(view) + event_lines(view)
    return md


def dead_group_lines(view: PopulationView) -> list[str]:
    """Each member's dead-group share over each segment between comparisons, as the stuck rule
    counts it (`population.stuck.dead_groups_of`: a group only a hint revived is dead), so a
    reader sees which moves revived groups and which members learned on their own."""
    from backend.population.stuck import dead_share

    steps = sorted({s.step for s in view.scores})
    if not steps:
        return []
    bounds = list(zip([0, *steps], steps))
    md = ["Dead groups by member and segment (a group only a hint revived counts as dead):", "",
          "| member | " + " | ".join(f"steps {a + 1}-{b}" for a, b in bounds) + " |",
          "|---|" + "---|" * len(bounds)]
    for m in view.members:
        cells = []
        for a, b in bounds:
            d = dead_share([m.run_dir], a + 1, b, 1.0) if (m.run_dir / "run.db").exists() else None
            cells.append(f"{d.share:.2f} ({d.groups})" if d and d.groups else "-")
        md.append(f"| {m.name} | " + " | ".join(cells) + " |")
    return md + [""]


def population_lines(view: PopulationView, name: str) -> list[str]:
    """One population's header and members table."""
    p = view.population
    rep = f"m{view.reported}" if view.reported is not None else "none yet"
    md = [f"### {name} (`{view.dir}`)", "",
          f"{p.mode} mode, {p.size} members, compared every {p.every} steps, step {p.step} of {p.steps_total}, "
          f"status {p.status}, {'autonomous' if p.auto_promote else 'supervised'}; reported member: {rep}.", "",
          "| member | seed | step | harness version | validation (latest) | 95% CI | n | parent |",
          "|---|---|---|---|---|---|---|---|"]
    for m in view.members:
        if m.val:
            lo, hi = m.val.interval
            val = f"{m.val.acc:.3f} | [{lo:.3f}, {hi:.3f}] | {m.val.n}"
        else:
            val = "n/a | | 0"
        parent = f"m{m.parent}" if m.parent is not None else "-"
        md.append(f"| {m.name} | {m.seed} | {m.step} | {_v(m.harness_version)} | {val} | {parent} |")
    return md + [""]


def event_lines(view: PopulationView) -> list[str]:
    """Every copy and move: the paired interval that decided it (target minus the best member),
    what it changed, its status, and its outcome at the next comparison (against its parent)."""
    md = ["| # | step | kind | member | parent | status | evidence (member - best) | change | outcome |",
          "|---|---|---|---|---|---|---|---|---|"]
    for e in view.events:
        ev = e.evidence
        evidence = f"{ev.diff:+.3f} [{ev.low:+.3f}, {ev.high:+.3f}] n {ev.n}" if ev.n else "-"
        if e.stuck:  # a stuck population's move, without a copy: the dead groups that made it
            st = e.stuck
            evidence += (f"; stuck: dead groups {st.dead}/{st.groups} = {st.share:.2f} [{st.low:.2f}, {st.high:.2f}] "
                         f"(steps {st.first}-{st.last}, threshold {st.threshold:g})")
        change = (f"`{e.knob}` {e.old_value} -> {e.new_value}" if e.knob else
                  f"policy v{e.policy_version}, harness {_v(e.harness_version)}" if e.kind == "copy" else "-")
        if e.diagnosis:
            change += f" ({_flat(e.diagnosis)[:80]})"
        outcome = (f"{e.outcome} at step {e.outcome_step}: {e.outcome_diff:+.3f} "
                   f"[{e.outcome_low:+.3f}, {e.outcome_high:+.3f}] n {e.outcome_n}" if e.outcome else "-")
        md.append(f"| {e.id} | {e.step} | {e.kind} | m{e.member} | m{e.parent} | {e.status}"
                  f"{f' ({_flat(e.error)[:60]})' if e.error else ''} | {evidence} | {change} | {outcome} |")
    if not view.events:
        md.append("| – | | | | | no copy or move yet | | | |")
    return md + [""]


def _v(version: int | None) -> str:
    return "-" if version is None else f"v{version}"


def _flat(text: str) -> str:
    return text.replace("\n", " ").replace("|", "/").replace("`", "'")


def best_of_n_lines(groups: list[Group], collect_run: Callable[[Path], dict]) -> list[str]:
    """Which of best-of-n's runs was reported for each seed, and on what validation."""
    rows = [g for g in groups if g.arm == "best-of-n"]
    if not rows:
        return []
    md = ["## Best-of-N static: the runs and the one reported", "",
          "| seed | run | run seed | last validation | reported |", "|---|---|---|---|---|"]
    for g in rows:
        records = [collect_run(m) for m in g.members]
        rep = reported_index(records)
        for i, r in enumerate(records):
            val = _last_val(r)
            md.append(f"| {g.seed} | {Path(r['dir']).name} | {r['seed']} | "
                      f"{'n/a' if val is None else f'{val:.3f}'} | {'yes' if i == rep else ''} |")
    return md + [""]
