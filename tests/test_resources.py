"""Resource limits: a full disk stops the run cleanly (state saved, clear
message, non-zero exit); GPU out-of-memory lowers the batch and carries on."""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from backend.store import Store, integrity_ok
from conftest import set_flags
from engine_waits import run_process


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_stops_cleanly(small_disk, tiny_overrides, tmp_path):
    from backend.harness.loader import default_harness_path

    # a reward that always varies, so step 1 trains and writes a checkpoint
    code = default_harness_path("math").read_text().replace(
        'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}', 'REWARD_WEIGHTS = {"correct": 1.0, "length": 0.1}')
    code += "\n\ndef reward_length(r):\n    return (len(r.completion) % 7) / 7\n"
    harness = tmp_path / "h.py"
    harness.write_text(code)
    run = small_disk / "run"
    sets = set_flags(*tiny_overrides, f"harness='{harness}'")
    # LoRA checkpoints (~4 MB each at r=16) do not fit in 3 MB: the first checkpoint write fills the disk
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", "--steps", "3",
                     "--run-dir", str(run), *sets, "--set", "evolve.enabled=false"])
    assert p.returncode == 3, p.stderr[-3000:]
    # the free-space check before each checkpoint (backend/disk.py) stops it before the write; a
    # write that still fills the disk stops it as "disk full": either is a clean stop
    assert ("disk nearly full" in p.stderr or "disk full" in p.stderr) and "Traceback" not in p.stderr
    assert integrity_ok(run / "run.db")
    s = Store.open(run, readonly=True)
    # nothing half-written: every stored rollout belongs to a committed step
    assert s.scalar("SELECT count(*) FROM rollouts WHERE step NOT IN (SELECT step FROM steps)") == 0
    # no committed policy version points at a checkpoint that is not fully on disk
    for pv in s.rows("SELECT * FROM policy_versions"):
        assert (Path(pv["checkpoint"]) / "adapter_model.safetensors").exists()
    assert s.run()["status"] == "stopped" or s.run()["status"] == "running"  # recorded if the disk allowed it


class _Holder:
    micro_batch = 8


def test_gpu_oom_lowers_batch_then_stops(tmp_path):
    from backend.loop import Engine, ResourceExhausted

    eng = Engine.__new__(Engine)  # only the retry logic: no model needed
    eng.store = Store.open(tmp_path / "run.db")
    eng.store.create_run("r", {}, 0, 1)
    eng.quiet = True
    holder, seen = _Holder(), []

    def step():
        seen.append(holder.micro_batch)
        if holder.micro_batch > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return "ok"

    assert eng.with_oom_retry(step, holder, "micro_batch") == "ok"
    assert seen == [8, 4, 2]
    holder.micro_batch = 1
    with pytest.raises(ResourceExhausted, match="micro_batch=1"):
        eng.with_oom_retry(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("oom")), holder, "micro_batch")
    warns = eng.store.rows("SELECT message FROM events WHERE level = 'warn'")
    assert any("lowering micro_batch from 8 to 4" in w["message"] for w in warns)
