"""The loop's side of the evolution stage: a thin, crash-proof adapter.

The loop calls these at step boundaries; each catches and records errors so
a failing evolution round never kills training ("a crashing harness
candidate is a row with a status, not an exception"). Operator commands are
not here: `backend/dispatch.py` applies every verb.
"""

from __future__ import annotations

import traceback


def context(engine, step: int):
    """What evolution (a round, a command, the post-eval check) sees of the engine at `step`."""
    from backend.evolve import EvolveContext

    from backend.trial import trial, trials_enabled

    return EvolveContext(store=engine.store, cfg=engine.cfg, step=step,
                         harness_version=engine.harness_version, harness=engine.harness,
                         probe=lambda h, n: probe(engine, h, n, step),
                         trial=trial(engine, step, {}) if trials_enabled(engine) else None,
                         log=lambda lvl, msg: engine.say(msg, lvl, step), checkpoint=engine.control.checkpoint)


def probe_size(engine, n_tasks: int) -> int:
    """Prompts per probe arm: on CUDA as many as the power calculation asks for to detect
    `evolve.min_effect` (docs/gate.md; at most `evolve.probe_max_tasks`), on the CPU `n_tasks`."""
    from backend.evolve.stats import probe_plan

    ev = engine.cfg.evolve
    cuda = str(getattr(engine.lm, "device", "cpu")).startswith("cuda")
    last = engine.store.latest_eval("validation")  # the incumbent's accuracy sets the variance
    plan = probe_plan(ev.min_effect, ev.min_gain, engine.cfg.train.group_size, n_tasks, ev.probe_max_tasks, cuda,
                      last["accuracy"] if last else None)
    return plan.tasks


def probe(engine, harness, n_tasks: int, step: int) -> list[dict]:
    """A batch from the current policy under `harness`, as rollout rows (not stored). Every arm
    of a round's probes draws the same prompts with the same sampling seeds (one seed per step)."""
    from backend.rollout import group_stats, rollout_row

    rng = engine.seed_step(10_000_000 + step)
    tasks = engine.env.sample_tasks(probe_size(engine, n_tasks), rng, harness.curriculum)
    items, _ = engine.collect(tasks, harness, engine.cfg.train.group_size)
    group_stats(items, harness)
    mnt = int(harness.sampling.get("max_new_tokens", 128))
    return [rollout_row(s, step, engine.harness_version, engine.policy_version, mnt) for s in items]


def evolution_round(engine, step: int) -> dict | None:
    """One round (never raises, but for the loop's StopRequested, a BaseException)."""
    if getattr(engine.cfg.evolve, "plant_trap", False):
        plant_trap(engine, step)
    try:
        from backend.evolve import run_round

        return run_round(context(engine, step))
    except Exception as e:
        engine.say(f"evolution round failed: {type(e).__name__}: {e}", "error", step)
        engine.store.log("error", traceback.format_exc(), kind="traceback", step=step)
        return None


def plant_trap(engine, step: int) -> None:
    """Submit the domain's planted exploitable harness once (evolve.plant_trap): the
    backtest must block it with a validity diagnostic; the report shows the evidence."""
    from backend.evolve import submit
    from backend.evolve.traps import trap_code, trap_domain

    if engine.store.count_interventions(proposer="trap"):
        return
    try:
        # the harness's DOMAIN (a mix plants the first listed trap that fits the harness)
        domain = trap_domain(engine.harness.domain, engine.harness.code)
        if domain is None:
            return
        code = trap_code(domain, engine.harness.code)
        res = submit(context(engine, step), code, title=f"planted trap: exploitable {domain} reward",
                     hypothesis="credits answers a policy can produce without solving the task", proposer="trap",
                     target="reward hack")
        engine.say(f"planted trap #{res.get('id')}: backtest {res.get('verdict')} ({res.get('reason', '')})"[:300],
                   step=step)
    except Exception as e:
        engine.say(f"planting the trap failed: {type(e).__name__}: {e}", "error", step)


def after_eval(engine, step: int, acc: float) -> None:
    try:
        from backend.evolve import after_eval as hook

        decision = hook(context(engine, step), acc)
    except Exception as e:
        engine.say(f"post-eval check failed: {type(e).__name__}: {e}", "error", step)
        return
    if decision and decision.get("restore_policy_step") is not None:
        engine.restore_policy(int(decision["restore_policy_step"]))
    engine.reload_harness()
