"""Bounded disk: checkpoint retention, the disk budget's clean stop, run sizes.

The real engine trains a tiny random Llama (the default model's tokenizer, 2 layers of width
32) under a harness whose reward never ties, so every step trains and checkpoints; the rules
for what a rollback or the validation best pins are checked on a synthetic store."""

from __future__ import annotations

import pytest

from backend.config import load_config
from backend.disk import room_problem, tree_bytes
from backend.errors import RunStopped
from backend.metrics_export import read_scalars
from backend.policy import checkpoint as ckpt
from backend.policy import retention
from backend.store import Store



def _cfg(model: str, harness: str, *extra: str):
    return load_config(None, [
        f"model.name={model}", f"harness={harness}", "train.tasks_per_step=1", "train.group_size=2",
        "train.max_new_tokens_cap=4", "eval.n_val=2", "eval.n_test=2", "eval.max_new_tokens=4", "eval.every=10",
        "evolve.enabled=false", "model.threads=1", *extra])


def _pv_steps(store: Store) -> list[int]:
    return store.policy_version_steps()


def _validation_best_before(store: Store, step: int) -> set[int]:
    """The validation best's checkpoint step as the prune after `step`'s commit saw it (the
    evaluation at `step` itself comes after that prune)."""
    rows = store.rows("SELECT policy_version FROM evals WHERE split = 'validation' AND step < ? "
                      "ORDER BY accuracy DESC, id DESC LIMIT 1", (step,))
    pv = store.get("policy_versions", rows[0]["policy_version"]) if rows and rows[0]["policy_version"] else None
    return {pv["step"]} if pv else set()


def test_thirty_steps_keep_the_latest_three_then_resume(tmp_path, tiny_model, spread_harness):
    from backend import runs

    run = tmp_path / "run"
    _, s = runs.start(_cfg(tiny_model, spread_harness, "steps=30", "train.keep_checkpoints=3",
                           "report_to=tensorboard"), run, quiet=True)
    assert s["status"] == "finished" and s["steps"] == 30
    store = Store.open(run, readonly=True)
    versions = _pv_steps(store)
    assert len(versions) >= 20  # nearly every step trained and saved a policy version
    kept = ckpt.saved_steps(run)
    # the latest three, plus the validation best (on a tie, the latest evaluation's policy)
    assert kept == sorted(set(versions[-3:]) | _validation_best_before(store, versions[-1]))
    assert kept[-1] == store.latest_policy_version()["step"] == versions[-1]
    assert not list((run / "checkpoints").glob(".tmp-*"))  # no half-pruned leftovers
    assert (ckpt.checkpoint_dir(run, kept[-1]) / "adapter_model.safetensors").exists()
    store.close()
    # the engine's metrics hook (tests/test_metrics_export.py has the rest): every step, every evaluation
    sc = read_scalars(run / "tensorboard")
    assert [s for s, _ in sc["reward/mean"]] == list(range(1, 31)) and "reward/spread/mean" in sc
    assert [s for s, _ in sc["eval/val/acc"]] == [0, 10, 20, 30] and len(sc["time/gen_s"]) == 30
    # resume from the newest checkpoint: it loads, trains on, and retention still holds
    _, s = runs.resume(run, steps=33, quiet=True)
    assert s["status"] == "finished" and s["steps"] == 33
    store = Store.open(run, readonly=True)
    versions = _pv_steps(store)
    assert ckpt.saved_steps(run) == sorted(set(versions[-3:]) | _validation_best_before(store, versions[-1]))
    assert [s for s, _ in read_scalars(run / "tensorboard")["reward/mean"]] == list(range(1, 34))  # none twice
    store.close()


def test_a_tiny_disk_budget_stops_cleanly_and_resume_goes_on(tmp_path, tiny_model, spread_harness):
    from backend import runs

    run = tmp_path / "run"
    runs.start(_cfg(tiny_model, spread_harness, "steps=1"), run, quiet=True)
    budget = (tree_bytes(run) + 3 * tree_bytes(ckpt.checkpoint_dir(run, ckpt.saved_steps(run)[-1]))) / 1e9
    with pytest.raises(RunStopped, match="disk budget") as stop:
        runs.resume(run, steps=30, overrides=[f"train.disk_budget_gb={budget}"], quiet=True)
    assert "--resume" in str(stop.value) and "\n" not in str(stop.value)
    store = Store.open(run, readonly=True)
    row, last = store.run(), store.last_step()
    assert row["status"] == "stopped" and "disk budget" in row["error"] and 1 < last < 30
    latest = store.latest_policy_version()
    assert (ckpt.checkpoint_dir(run, latest["step"]) / "adapter_model.safetensors").exists()  # state saved
    store.close()
    # with the budget raised, the run resumes from that checkpoint and finishes
    _, s = runs.resume(run, steps=last + 2, overrides=["train.disk_budget_gb=0"], quiet=True)
    assert s["status"] == "finished" and s["steps"] == last + 2


def test_room_problem_names_the_limit(tmp_path):
    (tmp_path / "blob").write_bytes(b"x" * 5000)
    assert room_problem(tmp_path, 1000, budget_gb=1e-6, min_free_gb=0) is not None  # 6 kB > 1 kB
    assert "disk budget" in room_problem(tmp_path, 1000, budget_gb=1e-6, min_free_gb=0)
    assert room_problem(tmp_path, 1000, budget_gb=1.0, min_free_gb=0) is None
    assert "disk nearly full" in room_problem(tmp_path, 1000, budget_gb=0, min_free_gb=1e9)  # an exabyte free: no


def test_rollback_targets_and_the_validation_best_are_kept(tmp_path):
    from synthetic_run import add_eval, build_run

    store = build_run(tmp_path / "run" / "run.db", steps=12)
    run = tmp_path / "run"
    for step in range(1, 14):  # step 13: saved, but its step never committed (a kill): left alone
        ckpt.checkpoint_dir(run, step).mkdir(parents=True)
    store.set_run(policy_version=4)
    add_eval(store, 4, [True, True, False])  # the validation best: policy version 4
    store.set_run(policy_version=12)
    add_eval(store, 12, [True, False, False])
    for promoted, judged in ((6, None), (2, 9)):
        iid = store.add_intervention(round_id=None, kind="reward", target="x", title="t", hypothesis="h",
                                     expected="e", diff="", code="", parent_version=1, proposer="offline",
                                     skills=[], params={}, history=[])
        store.update("interventions", iid, {"status": "promoted", "promoted_step": promoted, "judged_step": judged})
    gone = retention.prune(run, store, keep_latest=3)
    # kept: 10-12 (latest three), 4 (validation best), 6 (an unjudged promotion's rollback target), 13 (newer)
    assert ckpt.saved_steps(run) == [4, 6, 10, 11, 12, 13]
    assert gone == [1, 2, 3, 5, 7, 8, 9]
    assert store.count("policy_versions") == 12  # the history stays; only the files go
    assert retention.prune(run, store, keep_latest=0) == []  # 0 keeps every checkpoint


def test_runs_lists_each_runs_size(tmp_path, capsys):
    from synthetic_run import build_run

    import os
    from pathlib import Path

    run = Path(os.environ["EVOTUI_HOME"]) / "runs" / "a"
    build_run(run / "run.db", steps=1).close()
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    (run / "checkpoints" / "step_000001" / "adapter_model.safetensors").write_bytes(b"\0" * 2_000_000)
    from evotui.cli import main

    assert main(["runs"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if str(run) in x)
    assert " 2.1 MB " in line or " 2.2 MB " in line
