"""A population as one immutable snapshot: its members, their validation curves, its lineage.

    view = read_population(pop_dir)          # POP/population.sqlite and each POP/mI/run.db
    view.members[0].harness_version, view.members[0].val, view.events

What `evotui report` (report_population.py) and the TUI's population screen
(evotui/components/population_screen.py) both show, read in one place. Each
member is a normal run directory, read through the run store; a member not
started yet reads as step 0 with no evaluation. Validation accuracy comes with
its 95% Wilson interval and sample size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend.evolve.stats import wilson_interval
from backend.population.store import Event, Population, PopulationStore, Score
from backend.store import Store, loads


@dataclass(frozen=True)
class Accuracy:
    """k of n correct, with the 95% Wilson interval."""

    step: int
    k: int
    n: int

    @property
    def acc(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.k, self.n)

    def text(self) -> str:
        """`0.250 [0.102, 0.494] n 20`."""
        lo, hi = self.interval
        return f"{self.acc:.3f} [{lo:.3f}, {hi:.3f}] n {self.n}"


@dataclass(frozen=True)
class MemberView:
    """One member as the population screen and the report show it."""

    idx: int
    name: str
    seed: int
    run_dir: Path
    step: int = 0
    steps_total: int | None = None
    status: str = "not started"
    harness_version: int | None = None
    val: Accuracy | None = None
    """Its latest validation: the last comparison's score, else its run's latest evaluation."""
    parent: int | None = None
    """The member it last copied (its latest applied copy), None if it never copied one."""
    curve: tuple[tuple[int, float], ...] = ()
    """(step, validation accuracy) of every validation evaluation of its run."""


@dataclass(frozen=True)
class PopulationView:
    """Everything the screen and the report show of one population."""

    dir: Path
    population: Population
    members: tuple[MemberView, ...]
    events: tuple[Event, ...]
    scores: tuple[Score, ...] = field(default=())
    reported: int | None = None
    """The member reported on test: the best on validation at the last comparison."""

    @property
    def supervised(self) -> bool:
        return not self.population.auto_promote

    def pending(self) -> list[Event]:
        """Explore moves waiting for the operator."""
        return [e for e in self.events if e.kind == "move" and e.status == "pending"]


def read_population(pop_dir: Path) -> PopulationView:
    """The population under `pop_dir` now (StoreError if there is none)."""
    pop_dir = Path(pop_dir)
    ps = PopulationStore.open(pop_dir, readonly=True)
    try:
        population, members, events, scores = ps.population(), ps.members(), ps.events(), ps.scores()
    finally:
        ps.close()
    last = _last_scores(scores)
    views = tuple(_member(m.idx, m.name, m.seed, pop_dir / m.run_dir, last.get(m.idx), events) for m in members)
    return PopulationView(pop_dir, population, views, tuple(events), tuple(scores), reported_member(scores))


def reported_member(scores: list[Score]) -> int | None:
    """The member reported on test: the one the others were compared to (the best on
    validation) at the last comparison; None before the first. The rule of
    `population.coordinator.reported_member`, read from the same `best` flag here, as the TUI
    may not import the coordinator (it reaches the engine)."""
    last = _last_scores(scores)
    best = [s.member for s in last.values() if s.best]
    return min(best) if best else None


def _last_scores(scores: list[Score]) -> dict[int, Score]:
    if not scores:
        return {}
    step = max(s.step for s in scores)
    return {s.member: s for s in scores if s.step == step}


def _member(idx: int, name: str, seed: int, run_dir: Path, score: Score | None, events: list[Event]) -> MemberView:
    copies = [e for e in events if e.kind == "copy" and e.member == idx and e.status == "applied"]
    parent = copies[-1].parent if copies else None
    val = Accuracy(score.step, score.correct, score.n) if score else None
    if not (run_dir / "run.db").is_file():
        return MemberView(idx, name, seed, run_dir, val=val, parent=parent)
    s = Store.open(run_dir, readonly=True)
    try:
        run, step, evals = s.run(), s.last_step(), s.evals("validation")
    finally:
        s.close()
    if val is None and evals:
        val = eval_accuracy(evals[-1])
    return MemberView(idx, name, seed, run_dir, step=step, steps_total=run["steps_total"], status=run["status"],
                      harness_version=run["harness_version"], val=val, parent=parent,
                      curve=tuple((e["step"], e["accuracy"]) for e in evals if e["accuracy"] is not None))


def eval_accuracy(evaluation) -> Accuracy | None:
    """k of n of one stored held-out evaluation (None: it stored no per-problem results)."""
    results = [x for x in loads(evaluation["results_json"], []) or [] if isinstance(x, dict)]
    if not results:
        return None
    return Accuracy(evaluation["step"], sum(bool(x.get("correct")) for x in results), len(results))
