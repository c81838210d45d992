"""The loop's side of the evolution stage: the policy handle a round gets, and crash-proof calls.

The loop calls `evolution_round` and `after_eval` at step boundaries; each
returns the `Effects` the loop applies to itself (`Engine.apply`) and catches
and records errors, so a failing evolution round never kills training ("a
crashing harness candidate is a row with a status, not an exception").
Operator commands are not here: `backend/dispatch.py` applies every verb,
with a context from `context`.
"""

from __future__ import annotations

import traceback
from contextlib import AbstractContextManager, nullcontext

from backend.evolve import Effects, EvolveContext
from backend.evolve.rows import RolloutRow, rollout_rows
from backend.harness.loader import Harness
from backend.training import Training
from backend.trial import run_arm, trials_enabled
from backend.types import TrialArm


class EnginePolicy:
    """The engine's live policy as evolution sees it at round `step` (`backend.evolve.Policy`):
    probes generate with it, trials train copies of it. Made once per round, so the round's
    probes share their prompts and seeds and its trials share the incumbent's arm."""

    def __init__(self, engine: Training, step: int) -> None:
        self.engine, self.step = engine, step
        self.trials = trials_enabled(engine)
        self._incumbent: TrialArm | None = None

    def generate(self, harness: Harness, n_tasks: int) -> list[RolloutRow]:
        """A batch from the current policy under `harness`, as rollout rows (not stored). Every arm
        of a round's probes draws the same prompts with the same sampling seeds (one seed per step)."""
        from backend.rollout import rollout_row

        engine = self.engine
        rng = engine.seed_step(10_000_000 + self.step)
        tasks = engine.env.sample_tasks(probe_size(engine, n_tasks), rng, harness.curriculum)
        around = engine.control.activity  # the round's ("backtesting 2/4"), again once the probe is done
        engine.control.report(f"round at step {self.step}: probing {harness.sha[:8]} on {len(tasks)} prompts")
        try:
            items, _ = engine.collect(tasks, harness, engine.cfg.train.group_size)  # scored: filters, advantages
        finally:
            engine.control.report(around)
        mnt = int(harness.sampling.get("max_new_tokens", 128))
        version, policy = engine.harness_version, engine.policy_version
        return rollout_rows(rollout_row(s, self.step, version, policy, mnt) for s in items)

    def trial(self, candidate: Harness) -> tuple[TrialArm, TrialArm]:
        """(incumbent arm, candidate arm), the incumbent's computed once per round (`backend.trial`)."""
        k = self.engine.cfg.evolve.trial_steps
        if self._incumbent is None:
            self._incumbent = run_arm(self.engine, self.engine.harness, self.step, k)
        return self._incumbent, run_arm(self.engine, candidate, self.step, k)


def context(engine: Training, step: int, echo: bool = True) -> EvolveContext:
    """What evolution (a round, a command, the post-eval check) sees of the engine at `step`.
    `echo`: log lines go to the run's log at once (commands); a round's come back as effects."""
    return EvolveContext(store=engine.store, cfg=engine.cfg, step=step, harness_version=engine.harness_version,
                         harness=engine.harness, policy=EnginePolicy(engine, step),
                         echo=(lambda lvl, msg: engine.say(msg, lvl, step)) if echo else None,
                         checkpoint=engine.control.checkpoint)


def probe_size(engine: Training, n_tasks: int) -> int:
    """Prompts per probe arm: on CUDA as many as the power calculation asks for to detect
    `evolve.min_effect` (docs/gate.md; at most `evolve.probe_max_tasks`), on the CPU `n_tasks`."""
    from backend.evolve.stats import probe_plan

    ev = engine.cfg.evolve
    cuda = str(getattr(engine.lm, "device", "cpu")).startswith("cuda")
    last = engine.store.latest_eval("validation")  # the incumbent's accuracy sets the variance
    plan = probe_plan(ev.min_effect, ev.min_gain, engine.cfg.train.group_size, n_tasks, ev.probe_max_tasks, cuda,
                      last["accuracy"] if last else None)
    return plan.tasks


def evolution_round(engine: Training, step: int) -> Effects | None:
    """One round (never raises, but for the loop's StopRequested, a BaseException)."""
    if getattr(engine.cfg.evolve, "plant_trap", False):
        plant_trap(engine, step)
    try:
        from backend.evolve import run_round

        with scratch_shapes(engine.generator):
            return run_round(context(engine, step, echo=False))
    except Exception as e:
        engine.say(f"evolution round failed: {type(e).__name__}: {e}", "error", step)
        engine.store.log("error", traceback.format_exc(), kind="traceback", step=step)
        return None


def scratch_shapes(generator) -> AbstractContextManager:
    """What the round's probes allocate in `generator` is freed after it (`FastGenerator.scratch_shapes`;
    the other generators keep no cache per batch shape)."""
    scratch = getattr(generator, "scratch_shapes", None)
    return scratch() if scratch is not None else nullcontext()


def plant_trap(engine: Training, step: int) -> None:
    """Submit the domain's planted exploitable harness once (evolve.plant_trap): the
    backtest must block it with a validity diagnostic; the report shows the evidence."""
    from backend.evolve import submit
    from backend.evolve.traps import trap_code, trap_domain

    if engine.store.count_interventions(proposer="trap"):
        return
    try:
        # the harness's DOMAIN (a mix plants the first listed trap that fits the harness)
        domain = trap_domain(engine.harness.domain, engine.harness.code)
        code = trap_code(domain, engine.harness.code) if domain is not None else None
        if domain is None or code is None:
            return
        res = submit(context(engine, step), code, title=f"planted trap: exploitable {domain} reward",
                     hypothesis="credits answers a policy can produce without solving the task", proposer="trap",
                     target="reward hack")
        engine.say(f"planted trap #{res.id}: backtest {res.status.value} ({res.reason})"[:300],
                   step=step)
    except Exception as e:
        engine.say(f"planting the trap failed: {type(e).__name__}: {e}", "error", step)


def after_eval(engine: Training, step: int, acc: float) -> Effects | None:
    """The post-evaluation check (rollback or skill); its effects, or None when it failed."""
    try:
        from backend.evolve import after_eval as judge_promotions

        return judge_promotions(context(engine, step, echo=False), acc)
    except Exception as e:
        engine.say(f"post-eval check failed: {type(e).__name__}: {e}", "error", step)
        return None
