"""Co-evolution of the harness: diagnose, revise, propose, backtest, gate, learn skills.

What the loop calls (at step boundaries, in its own process):

    ctx = EvolveContext(store, cfg, step, harness_version, harness, probe, log)
    if cfg.evolve.enabled and step % cfg.evolve.every == 0:
        run_round(ctx)                       # never raises; returns a summary dict
    after_eval(ctx, accuracy)                # after each held-out eval: rollback / skill

Operator commands (approve, veto, auto-promote) are applied by the engine's one
dispatcher, `backend/dispatch.py`, through `gate.approve`, `gate.veto` and
`gate.set_auto_promote`.

The loop reloads the harness whenever runs.harness_version changes.
"""

from .context import EvolveContext
from .aggregate import failure_table, round_metrics
from .gate import after_eval, approve, promote, rollback
from .lineage import lineage
from .round import run_round, submit
from .skills import SkillError, export_skills, import_skills


__all__ = [
    "EvolveContext", "run_round", "approve", "promote", "rollback", "after_eval", "lineage",
    "failure_table", "round_metrics", "submit", "export_skills", "import_skills", "SkillError",
]
