"""Paired trials: what a probe cannot judge, judged by training (the loop's side).

A curriculum change alters which tasks a probe draws, and a token-budget
change trades compute for accuracy, so a probe of the current policy judges
them on the wrong question. A trial trains a *copy* of the current policy for
`evolve.trial_steps` steps under the candidate and, from the same snapshot
with the same seeds, under the incumbent, then evaluates both copies greedily
on the validation set (fixed difficulty: the held-out tasks never follow the
curriculum). Evolution compares the two lists of verdicts, paired by problem.

Afterwards the policy, its optimizer state and the generation engine are put
back exactly as they were: trial rollouts are budget, never training, so a
run whose trials promote nothing trains bit-identically to a run without them
(tests/test_invariant.py). The incumbent's arm is run once per round and
reused for every candidate of that round (`evolve_hooks.EnginePolicy.trial`).
"""

from __future__ import annotations

import copy
import time

import torch

from backend.envs import held_out_sets
from backend.harness.loader import Harness
from backend.training import Training
from backend.types import TrialArm



TRIAL_SEED = 30_000_000
"""Offset of the trial steps' seeds from the training steps' (`Engine.seed_step`)."""


class PolicySnapshot:
    """The state a trial changes: LoRA weights, the optimizer's state, and the batch sizes an
    out-of-memory retry lowers (the trainer's memory plan, the generator's batch). A retry inside
    a trial caps only the trial: left lowered, it would cap every later training step too, and
    the run would no longer train as it would have without the trial."""

    def __init__(self, engine: Training) -> None:
        self.params = {n: p.detach().clone() for n, p in engine.lm.model.named_parameters() if p.requires_grad}
        self.opt = copy.deepcopy(engine.trainer.opt.state_dict())
        self.micro_batch = engine.cfg.train.micro_batch
        self.plan = copy.copy(engine.trainer.plan)
        self.generation = generation_limit(engine.generator)

    def restore(self, engine: Training) -> None:
        with torch.no_grad():
            for n, p in engine.lm.model.named_parameters():
                if n in self.params:
                    p.copy_(self.params[n])
        engine.trainer.opt.load_state_dict(copy.deepcopy(self.opt))
        engine.cfg.train.micro_batch = self.micro_batch
        engine.trainer.plan = copy.copy(self.plan)
        if self.generation is not None:
            setattr(engine.generator, *self.generation)
        if hasattr(engine.generator, "refresh"):  # copies into parameters bypass the fast engine's change tracking
            engine.generator.refresh()


def generation_limit(generator: object) -> tuple[str, object] | None:
    """(attribute, value) of the batch limit an out-of-memory retry lowers on `generator`
    (`Engine.with_oom_retry` sets `batch_size`; the fast engine keeps it as `max_batch`, 0 while
    it plans from free memory); None for a generator without one."""
    own = vars(generator) if hasattr(generator, "__dict__") else {}
    return next(((a, own[a]) for a in ("max_batch", "batch_size") if a in own), None)


def train_arm(engine: Training, harness: Harness, step: int, k: int) -> int:
    """`k` GRPO updates of the live policy under `harness` (nothing stored); returns rollouts made."""
    made = 0
    for j in range(k):
        rng = engine.seed_step(TRIAL_SEED + step * 64 + j)  # the same tasks and sampling seeds in every arm
        tasks = engine.env.sample_tasks(engine.cfg.train.tasks_per_step, rng, harness.curriculum)
        items, _ = engine.collect(tasks, harness, engine.cfg.train.group_size)  # scored: filters, advantages
        made += len(items)
        engine.update_policy(items)
    return made


def validate(engine: Training, harness: Harness) -> tuple[list[str], list[bool]]:
    """Greedy verdicts of the live policy on the validation set, under `harness`'s prompt."""
    tasks = held_out_sets(engine.env, engine.cfg.eval.n_val, 0)["validation"]
    items, _ = engine.collect(tasks, harness, 1, greedy=True, max_new_tokens=engine.cfg.eval.max_new_tokens)
    return [s.task.id for s in items], [bool(s.verdict.correct) for s in items]


def run_arm(engine: Training, harness: Harness, step: int, k: int) -> TrialArm:
    """Train a copy of the current policy under `harness` and validate it; the live policy,
    its optimizer and the engine come back unchanged whatever happens."""
    t0 = time.perf_counter()
    snap = PolicySnapshot(engine)
    try:
        made = train_arm(engine, harness, step, k)
        ids, correct = validate(engine, harness)
    finally:
        snap.restore(engine)
    return TrialArm(harness.sha, ids, correct, made + len(ids), time.perf_counter() - t0)


def trials_enabled(engine: Training) -> bool:
    """`evolve.trials`: on, off, auto (on where a step is cheap: CUDA), or spent (on, for the
    candidates of spent rounds only: `evolve.schedule.evidence`)."""
    mode = engine.cfg.evolve.trials
    if mode == "auto":
        lm = getattr(engine, "lm", None)  # a policy-less engine (tests, tools) has no device
        return str(getattr(lm, "device", "cpu")).startswith("cuda")
    return mode in ("on", "spent")
