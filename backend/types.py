"""Types shared across layers that belong to none of them.

`Generation` is what a policy's generation engine returns and what an
environment's multi-turn episodes consume, so it lives below both: `policy`
and `envs` import it from here and never from each other. `Rollout` and
`Group` are the records the one harness semantics
(`backend.harness.semantics.apply_harness`) reads and returns, for training,
replay, probes and metrics alike. `Intervention` and `Backtest` are the
evolution records the store returns and evolution reads; `TrialArm` is what the
loop's trials hand to evolution's judgement.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable


@dataclass
class Generation:
    """One sampled continuation from the policy."""

    ids: list[int]
    text: str
    finish: str  # "stop" or "length"
    logprobs: list[float] | None = None


# generate(list of prompt token-id lists, max_new_tokens, temperature, top_p) -> generations
GenerateFn = Callable[[list[list[int]], int, float, float], list[Generation]]


JSON = dict[str, Any]


# ---------------------------------------------------------------- harness semantics records
# What applying a harness to a batch reads (`Rollout`) and how it groups the batch
# (`Group`). A rollout crosses into the sandboxed harness worker as plain data
# (`Rollout.view()`, the worker protocol); these records stay on the engine's side.

GroupKey = tuple[Any, ...]
"""Which GRPO group a rollout belongs to: `(step, group_idx)` for stored rollouts, `(group,)` in a live batch."""


@dataclass(frozen=True)
class Rollout:
    """One rollout as a harness sees it, and the group it is compared within.

    The fields after `group` are the documented view (README, 'What a harness
    sees'; `backend.harness.namespace.VIEW_FIELDS` on the worker's side, which a
    test keeps equal): never the evaluator's verdict, the stored reward or labels.
    """

    group: GroupKey
    question: str
    answer: Any
    prompt: str
    completion: str
    finish: str
    completion_tokens: int
    max_new_tokens: int
    obs: JSON
    turns: list[JSON]
    domain: str
    meta: JSON
    task_id: str

    def view(self) -> JSON:
        """The plain-data view sent to the harness worker (everything but `group`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "group"}


@dataclass(frozen=True)
class Group:
    """One GRPO group of a batch: the rollouts sampled for one prompt, judged against each other.

    `members` are positions in the batch, in batch order; `dead` says the group's
    rewards tie (`backend.harness.semantics.is_dead`), so GRPO learns nothing from it.
    """

    key: GroupKey
    members: tuple[int, ...]
    dead: bool

    @property
    def size(self) -> int:
        return len(self.members)


# ---------------------------------------------------------------- evolution records
# The store returns these (backend/store/records.py) and evolution decides on them.
# They live here, in the bottom layer, because the store sits below the harness and
# evolution layers (.importlinter) and must be able to build them.


@dataclass
class Intervention:
    """One single-factor harness change and its lifecycle (a row of `interventions`).

    `status` follows `backend.evolve.interventions.TRANSITIONS`; `history` is the
    log of transitions. The post-promotion watch is lifecycle state the gate
    decides on, so it has columns: `replaced_version` (what a rollback returns
    to), the validation evaluation it is judged against (`baseline_eval_id`,
    `baseline_acc`) and, once judged, `judged_step`, `judged_eval_id`,
    `judged_acc`, `judged_delta` and the paired `gain` evidence.
    """

    id: int
    round_id: int | None
    created_at: str
    updated_at: str
    kind: str
    target: str
    title: str
    hypothesis: str
    expected: str
    diff: str
    code: str
    parent_version: int | None
    child_version: int | None
    proposer: str
    status: str
    reason: str | None
    score: float | None
    promoted_step: int | None
    skills: list[str] = field(default_factory=list)
    history: list[JSON] = field(default_factory=list)
    params: JSON = field(default_factory=dict)
    """What the proposer recorded: `names` (the top-level names changed), `op`, `template`, ..."""
    replaced_version: int | None = None
    baseline_eval_id: int | None = None
    baseline_acc: float | None = None
    judged_step: int | None = None
    judged_eval_id: int | None = None
    judged_acc: float | None = None
    judged_delta: float | None = None
    gain: JSON | None = None

    @property
    def names(self) -> list[str]:
        """The top-level harness names this change touches (one for a valid candidate)."""
        return [str(n) for n in self.params.get("names") or []]

    @property
    def judged(self) -> bool:
        """Whether a validation evaluation after the promotion has judged it."""
        return self.judged_step is not None


@dataclass
class Backtest:
    """One backtest of an intervention (replay, probe or trial) with its decision's statistics."""

    id: int
    intervention_id: int
    created_at: str
    mode: str
    n_rollouts: int
    verdict: str
    reason: str
    ms: float
    metrics: JSON = field(default_factory=dict)
    metric: str | None = None
    effect: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    n: int | None = None
    underpowered: bool = False
    same_update: bool | None = None
    """A replay: whether the candidate left training's update as the incumbent's (`replay.same_update`)."""


@dataclass(frozen=True)
class TrialArm:
    """One arm of a paired trial: the validation verdicts of a policy copy trained under `sha`
    (`backend.trial` makes them, `backend.evolve.backtest.trial_decision` pairs them)."""

    sha: str
    task_ids: list[str]
    correct: list[bool]
    rollouts: int
    """Training rollouts plus validation completions this arm generated (budget)."""
    seconds: float
