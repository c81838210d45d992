"""The protocol between the loop and evolution: what a round gets, and what it gives back.

A round (and the post-evaluation check) gets an `EvolveContext`: the store, the
config, the step, the active harness, and a `Policy` handle, the one way
evolution reaches the live policy (fresh rollouts for a probe, policy copies for
a trial). It gives back `Effects`: the new active harness, the policy checkpoint
to restore, the skills learned and the log lines. The store has recorded all of
it already (the database is the record, and the interface to the TUI); the loop
applies the effects to itself from the return value, never by reading them back.

    ctx = EvolveContext(store, cfg, step, harness_version, harness, policy)
    effects = run_round(ctx)          # effects.report: what the round did
    engine.apply(effects, step)       # adopt the harness, restore the policy, write the log
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from backend.config import RunConfig
from backend.harness.loader import Harness
from backend.store import Store
from backend.types import TrialArm

from .rows import RolloutRow


if TYPE_CHECKING:
    from .records import RoundReport, RoundSummary


class Policy(Protocol):
    """The live policy, as far as evolution may use it. The loop implements it
    (`backend.evolve_hooks.EnginePolicy`); tests pass a stand-in."""

    @property
    def trials(self) -> bool:
        """Whether `trial` may be called (`evolve.trials`; off on the CPU by default)."""
        ...

    def generate(self, harness: Harness, n_tasks: int) -> list[RolloutRow]:
        """Fresh rollouts of the current policy under `harness`, scored by it, as rollout rows
        (not stored): `n_tasks` prompts (or more, where a power calculation asks for more) of a
        group each. Every call of one round draws the same prompts with the same sampling seeds,
        so the arms of a probe are paired."""
        ...

    def trial(self, candidate: Harness) -> tuple[TrialArm, TrialArm]:
        """(incumbent arm, candidate arm): copies of the policy trained `evolve.trial_steps` steps
        under each harness and validated; the live policy comes back unchanged."""
        ...


@dataclass
class Effects:
    """What evolution changed that the loop must apply to itself."""

    harness_version: int | None = None
    """The new active harness version (a promotion or a rollback); None: unchanged."""
    harness: Harness | None = None
    restore_policy_step: int | None = None
    """A rollback: restore the policy checkpoint at or before this step."""
    skills: list[str] = field(default_factory=list)
    """Skill cards learned or credited."""
    log: list[tuple[str, str]] = field(default_factory=list)
    """(level, message) lines for the run's log."""
    report: RoundReport | None = None
    """What a round did (None for the post-evaluation watch)."""

    @property
    def summary(self) -> RoundSummary:
        """The round's report as plain data (proposed, passed, promoted, ...), as its `rounds` row keeps it."""
        return self.report.row() if self.report is not None else {}


@dataclass
class Memo:
    """What one round computes once and reuses: the probe rollouts per harness sha (the incumbent
    is probed once, not once per candidate) and the trials it has run (`evolve.max_trials`)."""

    probes: dict[str, list[RolloutRow]] = field(default_factory=dict)
    trials: int = 0


@dataclass
class EvolveContext:
    store: Store
    cfg: RunConfig
    step: int
    harness_version: int
    harness: Harness
    policy: Policy | None = None
    """None: no generation (replay only); a probe's candidate fails with the reason."""
    echo: Callable[[str, str], None] | None = None
    """Where log lines go at once as well (an operator command's context: they would be dropped
    otherwise); a round's lines reach the loop as `effects.log`."""
    checkpoint: Callable[[str], None] = lambda activity: None
    """Say what the round is doing now ("round at step 5: backtesting 2/4") and let the engine honour
    a pause or a stop there (between candidates); may raise the loop's StopRequested."""
    memo: Memo = field(default_factory=Memo)
    effects: Effects = field(default_factory=Effects)

    def log(self, level: str, message: str) -> None:
        self.effects.log.append((level, message))
        if self.echo is not None:
            self.echo(level, message)

    def adopt(self, version: int, harness: Harness) -> None:
        """The active harness changed (promotion, rollback): the rest of the round and the loop follow."""
        self.harness_version, self.harness = version, harness
        self.effects.harness_version, self.effects.harness = version, harness

    def auto_promote(self) -> bool:
        return bool(self.store.run().get("auto_promote"))
