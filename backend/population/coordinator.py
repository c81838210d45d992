"""The population's loop: train a segment, compare, copy and move, until the last step.

    t = 0
    while t < steps:
        finish the events of comparison t       (copies, then moves; a resume re-applies them)
        every member trains to t + K             (members.run_segment: processes, packed on cards)
        compare them at t + K                    (scores.score: paired, on the same problems)
        judge the events of comparison t         (did each member beat its parent? a won move -> skill)
        decide: each member clearly behind copies a parent (parents.choose_parent) and, in explore
                mode, takes one move (evolve.explore); all recorded as planned at once
                (none behind but the population stuck: see below)
        t = t + K

A stuck population explores. When no member is clearly behind, nobody copies;
but if the members' pooled dead-group share over the segment just trained is
at least `population.stuck_dead_share` (`stuck.py`: most groups teach GRPO
nothing), then in explore mode every member but the best (or the
`population.stuck_movers` ranked last on validation) takes one move without
copying: it keeps its own policy and harness, and the move is its one change.
The event records the dead share with its groups and interval and the member's
validation against the best (its parent, whom the next comparison judges it
against). Copy mode never moves.

Every move, after a copy or stuck, skips the knob moves that tied or lost in
this population before (`stuck.tried_moves`) and the knobs other members'
moves of the same comparison took (`stuck.knobs_taken`): the moves of one
comparison are different experiments run side by side, and the next
comparison copies the one that won to the others.

`POP/population.sqlite` (`store.py`) records every step of it; `population.step`
moves on only when a comparison's events are all decided, so a stop anywhere
(SIGTERM, a kill) resumes where it left off: a member that reached the
segment's end is not trained again, scores are written again the same, planned
events are applied (each idempotent: `adopt.py`), nothing is decided twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.config import RunConfig, config_from_dict, to_dict
from backend.errors import EvoError
from backend.evolve.explore import propose_move
from backend.store import Store, StoreError
from backend.grid import Stopping

from . import adopt, lineage, scores as sc, stuck as st
from .members import last_line, member_config, member_seed, reached, run_segment
from .parents import choose_parent, top_labels
from .store import Evidence, Event, Member, MoveChange, Planned, Population, PopulationStore, Score


class PopulationFailed(EvoError):
    """A member could not train its segment: the population stops, its state saved."""

    exit_code = 1
    kind = "failed"


def create(cfg: RunConfig, pop_dir: Path) -> PopulationStore:
    """A new population directory with its database and members' configs (no member trains yet)."""
    if PopulationStore.exists(pop_dir):
        raise StoreError(f"{pop_dir} already holds a population; continue it with --resume {pop_dir}")
    if pop_dir.exists() and any(pop_dir.iterdir()):
        raise StoreError(f"{pop_dir} exists and is not empty; pick another --run-dir")
    pop_dir.mkdir(parents=True, exist_ok=True)
    p = cfg.population
    ps = PopulationStore.open(pop_dir, create=True)
    import json

    ps.create(Population(size=p.size, every=p.every, mode=p.mode, steps_total=cfg.steps, seed=cfg.seed,
                         auto_promote=cfg.evolve.auto_promote, step=0, status="created",
                         config_json=json.dumps(to_dict(cfg))),
              [Member(i, f"m{i}", f"m{i}", member_seed(cfg.seed, i)) for i in range(p.size)])
    return ps


def start(cfg: RunConfig, pop_dir: Path, jobs: int, quiet: bool = False) -> dict[str, Any]:
    """Create a population and train it to the end; returns its summary (`summary`)."""
    from backend.runs import harness_code

    harness_code(cfg)  # a broken harness file is reported before anything is written
    ps = create(cfg, pop_dir)
    ps.close()
    if not quiet:
        print(f"population dir: {pop_dir} ({cfg.population.size} members, compared every "
              f"{cfg.population.every} steps, {cfg.population.mode} mode)", flush=True)
    return drive(pop_dir, jobs, quiet)


def resume(pop_dir: Path, steps: int | None, jobs: int, quiet: bool = False) -> dict[str, Any]:
    """Go on with a stopped population (to `steps`, when given)."""
    ps = PopulationStore.open(pop_dir)
    try:
        if steps is not None:
            ps.set_population(steps_total=steps)
        pop = ps.population()
    finally:
        ps.close()
    if not quiet:
        print(f"resuming population {pop_dir} after comparison step {pop.step}", flush=True)
    return drive(pop_dir, jobs, quiet)


def default_jobs(size: int) -> int:
    """Members training at once when `--jobs` is not given: all of them with GPUs visible (packed
    on the cards as `evotui compare` packs runs), one at a time on the CPU."""
    from backend.grid import visible_gpus

    return size if visible_gpus() else 1


def drive(pop_dir: Path, jobs: int, quiet: bool = False) -> dict[str, Any]:
    """Segments until the last step (see the module docstring); the summary. `jobs` 0: `default_jobs`."""
    ps = PopulationStore.open(pop_dir)
    try:
        pop = ps.population()
        jobs = jobs or default_jobs(pop.size)
        base = config_from_dict(pop.config())
        configs = [member_config(pop.config(), i, pop.every) for i in range(pop.size)]
        ps.set_population(status="running", error="")
        with Stopping() as stopping:
            while True:
                pop = ps.population()
                finish_events(ps, pop_dir, configs, pop)
                if pop.step >= pop.steps_total or stopping.requested:
                    break
                t2 = min(pop.step + pop.every, pop.steps_total)
                runs = run_segment(pop_dir, base, configs, t2, jobs, stopping)
                if stopping.requested:
                    break
                missing = [r for r in runs if not reached(pop_dir / f"m{r.idx}", t2)]
                if missing:
                    why = "; ".join(f"m{r.idx} (exit {r.exit_code}): {last_line(r.log)}" for r in missing)
                    ps.set_population(status="failed", error=why[:1000])
                    raise PopulationFailed(f"member(s) did not reach step {t2}: {why}; resume with "
                                           f"`evotui run --headless --resume {pop_dir}`")
                line = compare(ps, pop_dir, configs, pop, t2)
                if not quiet:
                    print(line, flush=True)
        pop = ps.population()
        status = "finished" if pop.step >= pop.steps_total else "stopped"
        ps.set_population(status=status)
        return summary(pop_dir) | {"status": status}
    finally:
        ps.close()


def compare(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], pop: Population, step: int) -> str:
    """Score the members at `step`, judge the last comparison's events, decide this one's; its line."""
    vals = [sc.validation_at(pop_dir / f"m{i}", i, step) for i in range(pop.size)]
    scores = sc.score(vals, step)
    ps.record_scores(scores)
    judge_outcomes(ps, pop_dir, configs, vals, step)
    note = ""
    if step < pop.steps_total and not ps.events(step=step):
        note = decide(ps, pop_dir, configs, pop, scores, step)
    finish_events(ps, pop_dir, configs, ps.population(), step)
    ps.set_population(step=step)
    return lineage.segment_line(step, scores, ps.events(step=step)) + (f"; {note}" if note else "")


def decide(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], pop: Population,
           scores: list[Score], step: int) -> str:
    """Plan a copy (and in explore mode a move) for every member clearly behind, in one
    transaction; with none behind, a stuck population's move (`_decide_stuck`). Returns a note
    for the comparison's line when a stuck population moved no one because it still learns."""
    behind = [s for s in scores if s.behind]
    if not behind:
        return _decide_stuck(ps, pop_dir, configs, pop, scores, step) if pop.mode == "explore" else ""
    events = ps.events()
    window = pop.every
    labels = {s.member: top_labels(pop_dir / f"m{s.member}", step, window) for s in scores if not s.behind}
    parent = choose_parent(scores, events, labels)
    if parent is None:
        return ""
    compared = tuple(s.member for s in scores)
    planned = []
    for s in behind:
        ev = Evidence(s.diff, s.low, s.high, s.n, compared)
        planned.append(Planned(step, "copy", s.member, parent.member, ev, round(parent.score, 4)))
        if pop.mode == "explore":
            planned.append(Planned(step, "move", s.member, parent.member, ev, round(parent.score, 4)))
    ps.plan_events(planned)
    return ""


def _decide_stuck(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], pop: Population,
                  scores: list[Score], step: int) -> str:
    """Plan one move, without a copy, for the last members of a stuck population (module
    docstring); the note when it still learns and nobody moves."""
    first = max(1, step - pop.every + 1)
    dead = st.dead_share([pop_dir / f"m{i}" for i in range(pop.size)], first, step,
                         configs[0].population.stuck_dead_share)
    if not st.is_stuck(dead):
        return ""
    best = next(s for s in scores if s.best)
    rise = sc.rise_since_last(pop_dir / f"m{best.member}", step) if configs[0].population.stuck_unless_rising else None
    if st.still_learning(rise):
        return (f"dead groups {dead.share:.2f} but still learning, no move: m{best.member} "
                f"{rise.effect:+.3f} [{rise.ci_low:+.3f}, {rise.ci_high:+.3f}] since its last validation")
    compared = tuple(s.member for s in scores)
    ps.plan_events([Planned(step, "move", m.member, best.member, Evidence(m.diff, m.low, m.high, m.n, compared),
                            None, stuck=dead)
                    for m in st.movers(scores, configs[0].population.stuck_movers)])
    return ""


def finish_events(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], pop: Population,
                  step: int | None = None) -> None:
    """Apply what is planned (at `step`, default the population's) and what the operator approved."""
    step = pop.step if step is None else step
    todo = ps.events(step=step, statuses=("planned",)) + ps.events(statuses=("approved",))
    for e in todo:
        try:
            if e.kind == "copy":
                _copy(ps, pop_dir, e)
            elif e.status == "approved":
                _apply_move(ps, pop_dir, e)
            else:
                _move(ps, pop_dir, configs, pop, e)
        except Exception as err:  # one event's failure is a row with its reason; the others go on
            ps.set_event(e.id, "failed", error=f"{type(err).__name__}: {err}"[:500])


def _copy(ps: PopulationStore, pop_dir: Path, e: Event) -> None:
    source = adopt.source_state(pop_dir / f"m{e.parent}")
    done = adopt.apply_copy(pop_dir / f"m{e.member}", source, f"m{e.parent}", e.id, e.step)
    ps.set_event(e.id, "applied", policy_version=done.policy_version, harness_version=done.harness_version)


def _move(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], pop: Population, e: Event) -> None:
    copied = [c for c in ps.events(step=e.step, member=e.member) if c.kind == "copy"]
    if e.stuck is None and (not copied or copied[0].status != "applied"):
        ps.set_event(e.id, "failed", error="its copy did not apply")
        return
    if e.intervention_id is None:
        events = ps.events()
        tried = st.tried_moves(events)
        taken = st.knobs_taken(events, e.step)
        store = Store.open(pop_dir / f"m{e.member}", create=False)
        try:
            move = propose_move(store, configs[e.member], e.step, tried, taken)
        finally:
            store.close()
        if move is None:
            ps.set_event(e.id, "failed", error="no proposed move passed the safety gate")
            return
        ps.set_move(e.id, MoveChange(move.parent_version, move.knob, move.old_value, move.new_value, move.diff,
                                     move.diagnosis, move.target, move.intervention_id))
        e = ps.event(e.id) or e
    if pop.auto_promote:
        _apply_move(ps, pop_dir, e)
    else:  # supervised: the member trains on with its copied harness while the operator decides
        ps.set_event(e.id, "pending")


def _apply_move(ps: PopulationStore, pop_dir: Path, e: Event) -> None:
    run_dir = pop_dir / f"m{e.member}"
    if e.status == "approved" and adopt.active_version(run_dir) != e.harness_version:
        ps.set_event(e.id, "failed", error="the member's harness changed since the move was proposed")
        return
    done = adopt.apply_move(run_dir, int(e.intervention_id or 0), e.id, e.step)
    ps.set_event(e.id, "applied", policy_version=done.policy_version, harness_version=done.harness_version)


def judge_outcomes(ps: PopulationStore, pop_dir: Path, configs: list[RunConfig], vals: list[sc.Validation],
                   step: int) -> None:
    """The outcome of every applied event not judged yet: its member against its parent now."""
    for e in ps.events(statuses=("applied",)):
        if e.outcome is None and e.step < step:
            out = sc.outcome(vals, e.member, e.parent, step)
            ps.set_outcome(e.id, out)
            if e.kind == "move" and out.result == "won" and e.skill_id is None:
                sid = lineage.learn_skill(pop_dir / f"m{e.member}", e, out)
                if sid is not None:
                    ps.set_skill(e.id, sid)


# ---------------------------------------------------------------- results


def reported_member(pop_dir: Path) -> Score | None:
    """The member the population reports: the best on validation at the last comparison."""
    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        steps = ps.comparison_steps()
        return next((s for s in ps.scores(steps[-1]) if s.best), None) if steps else None
    finally:
        ps.close()


def test_accuracy(pop_dir: Path) -> float | None:
    """The population's result: its reported member's test accuracy at the last comparison."""
    best = reported_member(pop_dir)
    if best is None:
        return None
    s = Store.open(pop_dir / f"m{best.member}", readonly=True)
    try:
        row = s.latest_eval("test")
        return float(row["accuracy"]) if row and row["step"] == best.step else None
    finally:
        s.close()


def total_rollouts(pop_dir: Path) -> int:
    """Every rollout the population spent: all members' training rollouts as drawn (the steps'
    `n_rollouts`, which counts what resampling and hints drew again, not only the rollouts
    stored for training) plus their search's probes and trials (`evolve.budget.search_budget`),
    as `evotui compare` counts a run's, for a budget compared at equal rollouts."""
    import math

    from backend.evolve.budget import search_budget

    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        dirs = [pop_dir / m.run_dir for m in ps.members()]
    finally:
        ps.close()
    total = 0
    for d in dirs:
        if (d / "run.db").is_file():
            s = Store.open(d, readonly=True)
            try:
                spent = search_budget(s)
                total += int(spent["train_rollouts"]) + math.ceil(spent["search_rollouts"])
            finally:
                s.close()
    return total


def summary(pop_dir: Path) -> dict[str, Any]:
    """The end summary's facts: reported member, its test accuracy, rollouts, copies and moves."""
    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        events = ps.events()
        pop = ps.population()
    finally:
        ps.close()
    best = reported_member(pop_dir)
    return {"population_dir": str(pop_dir), "step": pop.step, "steps_total": pop.steps_total,
            "reported_member": best.member if best else None, "val_acc": best.acc if best else None,
            "test_acc": test_accuracy(pop_dir), "rollouts": total_rollouts(pop_dir),
            "copies": sum(e.kind == "copy" and e.status == "applied" for e in events),
            "moves": sum(e.kind == "move" and e.status == "applied" for e in events),
            "moves_won": sum(e.kind == "move" and e.outcome == "won" for e in events)}


def end_line(out: dict[str, Any]) -> str:
    """The population's end summary, one grep-able line."""
    def acc(v: object) -> str:
        return f"{v:.3f}" if isinstance(v, float) else "n/a"

    return (f"population {out['status']} at step {out['step']}/{out['steps_total']}: reported member "
            f"m{out['reported_member']} (validation {acc(out['val_acc'])}, test {acc(out['test_acc'])}); "
            f"{out['copies']} copies, {out['moves']} moves ({out['moves_won']} won); {out['rollouts']} rollouts "
            f"in all; {out['population_dir']}")
