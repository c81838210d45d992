"""Co-evolution of the harness: diagnose, revise, propose, backtest, gate, learn skills.

What the loop calls (at step boundaries, in its own process), with the policy
handle as the one way back to the live policy (`context.py`):

    ctx = EvolveContext(store, cfg, step, harness_version, harness, policy)
    if cfg.evolve.enabled and step % cfg.evolve.every == 0:
        effects = run_round(ctx)             # never raises; effects.report says what it did
    effects = after_eval(ctx, accuracy)      # after each held-out eval: rollback / skill

The loop applies the returned `Effects` (new active harness, policy to restore,
skills learned, log lines) to itself.

Operator commands (approve, veto, auto-promote) are applied by the engine's one
dispatcher, `backend/dispatch.py`, through `operator_commands` (`approve`, `veto`,
`set_auto_promote`).

After a command the loop follows runs.harness_version (commands come through the database).
"""

from .context import Effects, EvolveContext, Policy
from .diagnose import failure_table, round_metrics
from .operator_commands import approve
from .lineage import lineage
from .promotion import promote
from .records import RoundReport, Status, Verdict
from .round import run_round, submit
from .watch import after_eval, rollback
from .skills import SkillError, export_skills, import_skills


__all__ = [
    "EvolveContext", "Effects", "Policy", "run_round", "approve", "promote", "rollback", "after_eval", "lineage",
    "failure_table", "round_metrics", "submit", "export_skills", "import_skills", "SkillError", "RoundReport",
    "Status", "Verdict",
]
