"""The typed records an evolution round passes from step to step.

    seen = observe(ctx)                    -> Observation   the window's failure table and metrics
    plan = schedule.plan(ctx, seen)        -> Schedule      the candidates to judge, each a Scheduled
    verdicts = judge(ctx, plan.entries)    -> [Verdict]     one per candidate, with its Status
    made = promotion.decide(ctx, ...)      -> Decision      what was promoted, and what waits for a rebase
    report(ctx, RoundReport(...))          -> Effects       stored on the round's row, logged

Each step reads only the records before it; the store keeps them as rows (JSON
only there: `RoundReport.row`, and a replay's `ReplayMetrics`, its backtest's `metrics_json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Sequence, TypedDict

from .failures import FailureRow, RoundMetrics
from .interventions import Evidence
from .stats import DecisionRecord


class Status(str, Enum):
    """A judgement's outcome (`stats.decide`): `inconclusive` found no harm but no clear gain."""

    PASSED = "passed"
    INCONCLUSIVE = "inconclusive"
    FAILED = "failed"


@dataclass(frozen=True)
class Observation:
    """What a round saw: its window of steps, their failure table and drift metrics, its round id."""

    step: int
    steps: range
    table: list[FailureRow]
    """Failure-table entries, most frequent first (`diagnose.failure_table`)."""
    metrics: RoundMetrics
    round_id: int


HELD_PREFIX = "search memory: "
"""How a search-memory hold's refusal starts (`search_memory.Hold.text`): a round's report and the
run's search report tell its skips from churn's by it."""


@dataclass(frozen=True)
class Skip:
    """A candidate the round's rules refused before any backtest (churn or the search memory), and why."""

    title: str
    key: str
    proposer: str
    reason: str

    @property
    def held(self) -> bool:
        """Refused by the search memory (a hold), not by churn."""
        return self.reason.startswith(HELD_PREFIX)


@dataclass(frozen=True)
class Scheduled:
    """A recorded candidate the judge is to try, and how."""

    id: int
    evidence: Evidence
    look_of: int | None = None
    """A second or later look at this intervention: the look spends half the error rate."""


@dataclass(frozen=True)
class Schedule:
    """What a round tries: every candidate it recorded (failed proposals too) and those to judge."""

    proposed: tuple[int, ...] = ()
    entries: tuple[Scheduled, ...] = ()
    skipped: tuple[Skip, ...] = ()
    spent: tuple[str, ...] | None = None
    """A spent round (nothing left to propose): the knobs left for a trial; None otherwise."""


@dataclass(frozen=True)
class Verdict:
    """One judgement of one intervention (a `backtests` row)."""

    id: int
    status: Status
    reason: str
    score: float = 0.0
    backtest_id: int | None = None
    mode: str = "replay"
    """What judged it: replay, probe or trial."""


class InvalidFigures(TypedDict):
    """One validity label over the replayed rollouts it flags (under either harness)."""

    n: int
    high_new: int
    """Flagged rollouts the candidate scores high..."""
    high_old: int
    """...and the incumbent."""
    examples: list[int]
    """Ids of flagged rollouts the candidate scores high (at most 8)."""


class CopyFigures(TypedDict):
    """One kind of adversarial copy: the share of copies scored high and their mean reward, per harness."""

    n: int
    high_old: float
    high_new: float
    mean_old: float
    mean_new: float


class Blocked(TypedDict):
    """What blocked a candidate: the validity label, and ids of rollouts it scored high."""

    label: str
    examples: Sequence[int | None]
    """Rollout ids (None for a probe's rollouts, which are not stored)."""


class ReplayMetrics(TypedDict, total=False):
    """What a replay backtest keeps (its `metrics_json`): each figure for the incumbent (`_old`)
    and the candidate (`_new`) over the same replayed rollouts (`replay.judge`)."""

    n_rollouts: int
    n_groups: int
    agreement_old: float
    agreement_new: float
    auc_old: float | None
    auc_new: float | None
    dead_frac_old: float
    dead_frac_new: float
    kept_frac_old: float
    kept_frac_new: float
    kept_dead_frac_old: float
    kept_dead_frac_new: float
    kept_agreement_old: float
    kept_agreement_new: float
    adv_agreement_old: float
    adv_agreement_new: float
    error_share_old: float
    error_share_new: float
    diag_error_share_old: float
    diag_error_share_new: float
    same_update: bool
    """Training's update is the incumbent's on these rollouts (`replay.same_update`)."""
    revived: int
    """Groups dead under the incumbent that the candidate revives..."""
    killed: int
    """...and live ones it kills."""
    revived_examples: list[list[Any]]
    invalid: dict[str, InvalidFigures]
    regressions: list[int]
    """Rollouts an earlier promotion fixed that the candidate judges wrong again."""
    fixed_checked: int
    fixed_ids: list[int]
    """Rollouts the candidate judges right and the incumbent did not (guarded from then on)."""
    blocked: Blocked
    deltas: dict[str, float]
    """Candidate minus incumbent (dead: incumbent minus candidate), per figure."""
    decision: DecisionRecord
    adversarial: dict[str, CopyFigures]
    incumbent_version: int
    # a diagnostic's change (`replay.judge`, kind "diagnostic")
    unlabeled_old: int
    label: str
    fires_old: int
    fires_new: int
    false_fire_old: float
    false_fire_new: float
    newly_labeled: int
    coverage: float


@dataclass(frozen=True)
class Decision:
    """Auto mode's promotions so far in a round. `rebase`: the best candidate left was built on a
    version that is no longer active; the round rebases it and judges it again before deciding on."""

    promoted: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    rebase: int | None = None


class RoundSummary(TypedDict, total=False):
    """A round's report as plain data (`RoundReport.row`): the `rounds` row's summary and the loop's view."""

    step: int
    round_id: int | None
    proposed: list[int]
    passed: list[int]
    inconclusive: list[int]
    failed: list[int]
    skipped: list[dict[str, Any]]
    promoted: int | None
    harness_version: int | None
    error: str | None
    ms: float
    also_promoted: list[int]
    """Further promotions of the round, after the first."""
    spent: list[str]
    """A spent round: the knobs left for a trial."""
    failure_table: list[dict[str, Any]]
    """The top of the window's failure table (label, count, share, trend)."""
    metrics: RoundMetrics


@dataclass(frozen=True)
class RoundReport:
    """What a round did, as its `rounds` row and log line say it."""

    step: int
    harness_version: int
    round_id: int | None = None
    seen: Observation | None = None
    plan: Schedule = field(default_factory=Schedule)
    verdicts: tuple[Verdict, ...] = ()
    decision: Decision = field(default_factory=Decision)
    error: str | None = None
    ms: float = 0.0

    def ids(self, status: Status) -> list[int]:
        return [v.id for v in self.verdicts if v.status is status]

    @property
    def failed(self) -> list[int]:
        if self.error and not self.verdicts:  # stopped before judging: nothing was judged failed
            return []
        judged = {v.id for v in self.verdicts if v.status is not Status.FAILED}
        return [i for i in self.plan.proposed if i not in judged]

    def text(self) -> str:
        """The one-line summary (the round's log line and its stored summary)."""
        if self.error:
            return f"error: {self.error}"
        made = self.decision.promoted
        also = "".join(f", then #{i}" for i in made[1:])
        promoted = f"; promoted #{made[0]}{also}, now v{self.harness_version}" if made else ""
        held = sum(s.held for s in self.plan.skipped)
        churn = len(self.plan.skipped) - held
        skipped = f", {churn} skipped (churn)" if churn else ""
        skipped += f", {held} held by the search memory" if held else ""
        if self.plan.spent is not None:
            left = f"; left for a trial (evolve.trials off): {', '.join(self.plan.spent)}" if self.plan.spent else ""
            skipped += f"; no untried move this run can judge{left}"
        return (f"{len(self.plan.proposed)} proposed, {len(self.ids(Status.PASSED))} passed, "
                f"{len(self.ids(Status.INCONCLUSIVE))} inconclusive, {len(self.failed)} failed{skipped}{promoted}")

    def row(self) -> RoundSummary:
        """The summary as plain data (the store's and the loop's view of a round)."""
        out: RoundSummary = {
            "step": self.step, "round_id": self.round_id, "proposed": list(self.plan.proposed),
            "passed": self.ids(Status.PASSED), "inconclusive": self.ids(Status.INCONCLUSIVE), "failed": self.failed,
            "skipped": [asdict(s) for s in self.plan.skipped],
            "promoted": self.decision.promoted[0] if self.decision.promoted else None,
            "harness_version": self.harness_version, "error": self.error, "ms": self.ms}
        if self.decision.promoted:
            out["also_promoted"] = list(self.decision.promoted[1:])
        if self.plan.spent is not None:
            out["spent"] = list(self.plan.spent)
        if self.seen is not None:
            out["failure_table"] = [{k: e[k] for k in ("label", "count", "share", "trend")}
                                    for e in self.seen.table[:6]]
            out["metrics"] = self.seen.metrics
        return out
