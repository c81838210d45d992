"""`train.checkpoint_overlap`: a step's checkpoint written while the next step generates.

A real engine at tiny sizes, in process (the tiny random Llama of tests/tiny_llama.py under a
harness whose reward never ties, so every step trains and saves a version). The overlapped run
must store what the plain one stores; a write that fails must leave nothing of its step; a run
that stops with a version pending must resume to what an uninterrupted run stores.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from test_policy_versions import _adapter, _cfg as base_cfg, _engine

from backend.loop import Engine
from backend.policy import checkpoint as ckpt
from backend.progress import StepProgress
from backend.store import Store

pytestmark = pytest.mark.slow  # a real (tiny) model trained in process

TIMING = ("gen_ms", "eval_ms", "created_at")


def _cfg(model: str, harness: str, overlap: bool):
    """test_policy_versions' tiny run, 3 steps, with or without the overlap."""
    cfg = base_cfg(model, harness)
    cfg.steps, cfg.train.checkpoint_overlap = 3, overlap
    return cfg


def _stored(store: Store) -> dict:
    """What a run stored, without its timings and paths."""
    rollouts = [{k: v for k, v in r.items() if k not in TIMING}
                for r in store.rows("SELECT * FROM rollouts ORDER BY id")]
    steps = store.rows("SELECT step, policy_version, loss, entropy, grad_norm, n_rollouts FROM steps ORDER BY step")
    versions = store.rows("SELECT id, parent, step, harness_version FROM policy_versions ORDER BY id")
    return {"rollouts": rollouts, "steps": steps, "versions": versions,
            "run_policy": store.run()["policy_version"], "last_step": store.last_step()}


def _same_adapter(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_overlapped_run_stores_what_the_plain_run_stores(tmp_path, tiny_model, spread_harness):
    plain = _engine(tmp_path / "plain", _cfg(tiny_model, spread_harness, overlap=False))
    plain.run()
    overlapped = _engine(tmp_path / "overlap", _cfg(tiny_model, spread_harness, overlap=True))
    overlapped.run()
    a, b = _stored(plain.store), _stored(overlapped.store)
    assert len(a["versions"]) == 3 and a["last_step"] == 3
    assert a == b
    assert _same_adapter(_adapter(plain), _adapter(overlapped))
    assert overlapped.pending is None  # the run's end stored the last version
    assert (ckpt.checkpoint_dir(overlapped.run_dir, 3) / "adapter_model.safetensors").is_file()


def test_a_failing_overlapped_write_removes_its_step(tmp_path, tiny_model, spread_harness, monkeypatch):
    """The step's rows are committed before its files are written; a write that fails (a full
    disk) removes them again when the loop waits for the files, and raises."""
    engine = _engine(tmp_path / "run", _cfg(tiny_model, spread_harness, overlap=True))
    engine.train_step(1, StepProgress(3, quiet=True).start(1))
    engine.settle_checkpoint()
    before = _stored(engine.store)

    def full_disk(folder, *args, **kwargs):
        raise OSError(28, "No space left on device")

    from backend.policy import checkpoint_tensors

    monkeypatch.setattr(checkpoint_tensors, "write_safetensors", full_disk)  # the adapter's files
    engine.train_step(2, StepProgress(3, quiet=True).start(2))
    assert engine.store.last_step() == 2  # committed, its version pending
    with pytest.raises(OSError, match="No space left"):
        engine.settle_checkpoint()
    assert _stored(engine.store) == before
    assert not ckpt.checkpoint_dir(engine.run_dir, 2).exists()


@pytest.mark.parametrize("files", ["in place", "missing"])
def test_a_run_stopped_with_a_version_pending_resumes_as_one_that_never_stopped(
        tmp_path, tiny_model, spread_harness, files):
    """Killed after step 2 committed and before its version was stored: the next start stores the
    version when the checkpoint's folder is there, or removes step 2 to train it again."""
    whole = _engine(tmp_path / "whole", _cfg(tiny_model, spread_harness, overlap=True))
    whole.run()

    cfg = _cfg(tiny_model, spread_harness, overlap=True)
    run = tmp_path / "killed"
    engine = _engine(run, cfg)
    for step in (1, 2):
        engine.train_step(step, StepProgress(3, quiet=True).start(step))
    engine.pending.writing.result()  # the thread finished; the process dies before `settle`
    assert engine.store.pending_version()[0] == 2
    if files == "missing":
        shutil.rmtree(ckpt.checkpoint_dir(run, 2))
    engine.store.close()
    del engine

    resumed = Engine(run, cfg, Store.open(run, create=False), quiet=True)
    assert resumed.store.pending_version() is None
    assert resumed.store.last_step() == (2 if files == "in place" else 1)
    resumed.run()
    assert _stored(resumed.store) == _stored(whole.store)
    assert _same_adapter(_adapter(resumed), _adapter(whole))
