"""Exploit and explore, applied to a member's run directory while it is not training.

A copy (exploit) gives the target member the source's current policy and
harness: the source's checkpoint folder (adapter, optimizer and trainer state)
is copied into the target's `checkpoints/copies/e{event}` (under a temporary
name, then renamed: a kill never leaves a half-copied folder behind a valid
name), then one transaction of the target's store adds a policy version
pointing at it and a harness version with the source's code, and points the
run at both. A resume of the target loads what the run points at
(`Engine.__init__`: `Store.current_policy_version`, `runs.harness_version`),
so its next segment trains on from the copy with its own seed.

A move (explore) makes a gated candidate (`evolve.explore`) the target's
active harness the same way: one transaction, its intervention promoted
without a promotion step, so the member's own post-evaluation watch does not
judge it (the next comparison does).

Both are idempotent: the harness version carries a marker note naming the
event, and a resume that finds it does not apply the event again.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.evolve import interventions as iv
from backend.evolve.edit import unified_diff
from backend.harness.loader import sha
from backend.store import Store, now


@dataclass(frozen=True)
class Adopted:
    """What the target's store points at after an event: policy and harness versions."""

    policy_version: int | None
    harness_version: int


@dataclass(frozen=True)
class SourceState:
    """What a copy takes from its source member."""

    checkpoint: Path | None
    """The source's current policy checkpoint (None: the base model, nothing trained yet)."""
    code: str
    harness_version: int


def marker(event_id: int, kind: str) -> str:
    return f"population {kind} e{event_id}"


def source_state(run_dir: Path) -> SourceState:
    s = Store.open(run_dir, readonly=True)
    try:
        pv = s.current_policy_version()
        hv = int(s.run()["harness_version"])
        code = (s.harness_version(hv) or {})["code"]
        return SourceState(s.checkpoint_of(pv), code, hv)
    finally:
        s.close()


def _marked(store: Store, note: str) -> Adopted | None:
    for v in store.live_versions():
        if (v.get("note") or "").startswith(note + ":") or v.get("note") == note:
            return Adopted(store.run().get("policy_version"), int(v["id"]))
    return None


def copy_checkpoint(src: Path, target_run: Path, event_id: int) -> Path:
    """The source's checkpoint folder, copied atomically into the target run; its new path."""
    root = target_run / "checkpoints" / "copies"
    final = root / f"e{event_id}"
    if final.is_dir():  # a resume after the rename: already whole
        return final
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f".tmp-e{event_id}-*"):  # a copy a kill cut short
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-e{event_id}-{os.getpid()}"
    shutil.copytree(src, tmp)
    os.replace(tmp, final)
    return final


def _activate(store: Store, code: str, note: str, values: dict[str, Any], intervention_id: int | None = None) -> int:
    """Inside a transaction: the new active harness version, the old one superseded."""
    old = int(store.run()["harness_version"])
    old_code = (store.harness_version(old) or {})["code"]
    store.update("harness_versions", old, {"status": "superseded"})  # the active one: the run points at it
    vid = store.insert("harness_versions", {
        "parent": old, "created_at": now(), "code": code, "sha": sha(code), "status": "active",
        "diff": unified_diff(old_code, code, f"a/harness_v{old}.py", "b/harness.py"),
        "intervention_id": intervention_id, "note": note})
    store.update("runs", 1, dict(values, harness_version=vid, updated_at=now()))
    if intervention_id is not None:
        store.update("interventions", intervention_id, {"child_version": vid, "replaced_version": old})
    return vid


def apply_copy(target_run: Path, source: SourceState, source_name: str, event_id: int, step: int) -> Adopted:
    """Make the target member a copy of the source (see the module docstring); idempotent."""
    note = marker(event_id, "copy")
    target = Store.open(target_run, create=False)
    try:
        done = _marked(target, note)
        if done is not None:
            return done
        ckpt = copy_checkpoint(source.checkpoint, target_run, event_id) if source.checkpoint else None
        with target.tx():
            pv = None
            if ckpt is not None:
                pv = target.insert("policy_versions", {
                    "parent": target.run().get("policy_version"), "step": step, "checkpoint": str(ckpt),
                    "heldout_acc": None, "harness_version": None, "created_at": now()})
            hv = _activate(target, source.code, f"{note}: {source_name} v{source.harness_version}",
                           {"policy_version": pv})
            if pv is not None:
                target.update("policy_versions", pv, {"harness_version": hv})
        return Adopted(pv, hv)
    finally:
        target.close()


def apply_move(target_run: Path, intervention_id: int, event_id: int, step: int) -> Adopted:
    """Make a gated move the target's active harness; idempotent."""
    note = marker(event_id, "move")
    target = Store.open(target_run, create=False)
    try:
        done = _marked(target, note)
        if done is None:
            row = iv.get(target, intervention_id)
            with target.tx():
                hv = _activate(target, row.code, f"{note}: {row.title}", {}, intervention_id)
            done = Adopted(target.run().get("policy_version"), hv)
        if iv.get(target, intervention_id).status in ("passed", "approved"):
            iv.transition(target, intervention_id, "promoted", f"population move e{event_id} at step {step}",
                          version=done.harness_version, step=step)
        return done
    finally:
        target.close()


def active_version(run_dir: Path) -> int:
    s = Store.open(run_dir, readonly=True)
    try:
        return int(s.run()["harness_version"])
    finally:
        s.close()
