"""The loop's side of the evolution stage: a thin, crash-proof adapter.

The loop calls these at step boundaries; each catches and records errors so
a failing evolution round never kills training ("a crashing harness
candidate is a row with a status, not an exception").
"""

from __future__ import annotations

import traceback


def _context(engine, step: int):
    from backend.evolve import EvolveContext

    return EvolveContext(store=engine.store, cfg=engine.cfg, step=step,
                         harness_version=engine.harness_version, harness=engine.harness,
                         probe=lambda h, n: probe(engine, h, n, step), log=lambda lvl, msg: engine.say(msg, lvl, step))


def probe(engine, harness, n_tasks: int, step: int) -> list[dict]:
    """A small batch from the current policy under `harness`, as rollout rows (not stored)."""
    from backend.rollout import group_stats, rollout_row

    rng = engine.seed_step(10_000_000 + step)
    tasks = engine.env.sample_tasks(n_tasks, rng, harness.curriculum)
    items, _ = engine.collect(tasks, harness, engine.cfg.train.group_size)
    group_stats(items, harness)
    mnt = int(harness.sampling.get("max_new_tokens", 128))
    return [rollout_row(s, step, engine.harness_version, engine.policy_version, mnt) for s in items]


def evolution_round(engine, step: int) -> dict | None:
    try:
        from backend.evolve import run_round

        return run_round(_context(engine, step))
    except Exception as e:
        engine.say(f"evolution round failed: {type(e).__name__}: {e}", "error", step)
        engine.store.log("error", traceback.format_exc(), kind="traceback", step=step)
        return None


def apply_command(engine, cmd: dict, step: int) -> tuple[str, str]:
    try:
        from backend.evolve import apply_command as apply

        return apply(_context(engine, step), cmd)
    except Exception as e:
        return "rejected", f"{type(e).__name__}: {e}"


def after_eval(engine, step: int, acc: float) -> None:
    try:
        from backend.evolve import after_eval as hook

        decision = hook(_context(engine, step), acc)
    except Exception as e:
        engine.say(f"post-eval check failed: {type(e).__name__}: {e}", "error", step)
        return
    if decision and decision.get("restore_policy_step") is not None:
        engine.restore_policy(int(decision["restore_policy_step"]))
    engine.reload_harness()
