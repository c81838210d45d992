"""A population of runs: N members trained side by side, compared on validation every K steps.

A member clearly behind copies a better member (exploit) and, in explore mode, takes one
proposed harness move (explore). `store` holds the population database and its typed records.

    start / resume          coordinator.start(cfg, pop_dir, jobs), coordinator.resume(pop_dir, steps, jobs)
    approve / veto          decisions.approve(pop, event_id), decisions.veto(pop, event_id) (supervised moves)
    results                 coordinator.reported_member, test_accuracy, total_rollouts, summary
"""

from .decisions import approve, veto

__all__ = ["approve", "veto"]
