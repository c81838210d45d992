"""Which policy checkpoints a run keeps; the rest are deleted after each step.

One checkpoint per policy version kept forever fills a disk (about 55 MB each
at the GPU profile). A run keeps:

- the latest `train.keep_checkpoints` (0: every checkpoint);
- the newest policy version, and the run's current policy (the one a resume
  loads; after a rollback an older one);
- for every promotion no validation evaluation has judged yet, the checkpoint
  a rollback would restore (the newest at or before the promotion step,
  `Store.policy_version_at`, the rule `Engine.restore_policy` follows);
- the validation best (the policy of the best validation evaluation).

Pruning runs after the step's commit, so the checkpoint a resume needs is
always the committed one; folders newer than the last committed policy
version (a step cut short) are left for the next save to replace.
"""

from __future__ import annotations

from pathlib import Path

from . import checkpoint as ckpt


def kept_steps(store, keep_latest: int) -> set[int]:
    """Checkpoint steps the run must keep, by the rules above (from the store alone)."""
    steps = store.policy_version_steps()
    keep = set(steps if keep_latest <= 0 else steps[-keep_latest:])
    current = store.run().get("policy_version")
    pinned = [store.latest_policy_version(), store.get("policy_versions", current) if current else None,
              store.validation_best_policy_version()]
    last = store.last_step()
    pinned += [store.policy_version_at(p.promoted_step) for p in store.unjudged_promotions(last)
               if p.promoted_step is not None]
    keep |= {p["step"] for p in pinned if p}
    return keep


def prune(run_dir: Path, store, keep_latest: int) -> list[int]:
    """Delete the checkpoints `kept_steps` does not keep; returns their steps."""
    latest = store.latest_policy_version()
    if latest is None:
        return []
    keep = kept_steps(store, keep_latest)
    gone = [s for s in ckpt.saved_steps(run_dir) if s <= latest["step"] and s not in keep]
    for step in gone:
        ckpt.remove(run_dir, step)
    return gone
