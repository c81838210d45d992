"""`evotui export RUN --policy`: the trained policy as a folder transformers alone loads, whose
outputs are the policy's own (the adapter merged, not dropped), with where it came from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backend.store import Store
from conftest import TINY, set_flags
from engine_waits import run_process
from test_bad_input_cli import one_line_error

PROBE = [1, 5, 9, 2, 7, 3]

LOGITS = """
import json, sys, torch
from transformers import AutoModelForCausalLM
out = []
for folder in sys.argv[2:]:
    m = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        out.append(m(torch.tensor([json.loads(sys.argv[1])])).logits[0].float().tolist())
print(json.dumps(out))
"""


def evotui(*args) -> subprocess.CompletedProcess:
    return run_process([sys.executable, "-m", "evotui", *args], "evotui export")


def fresh_logits(*folders: Path) -> list[torch.Tensor]:
    """Each exported model's logits on PROBE, in an interpreter that imports neither evotui nor peft."""
    p = subprocess.run([sys.executable, "-c", LOGITS, json.dumps(PROBE), *map(str, folders)], capture_output=True,
                       text=True, timeout=300, cwd=folders[0])
    assert p.returncode == 0, p.stderr[-2000:]
    return [torch.tensor(x) for x in json.loads(p.stdout)]


def policy_logits(model_name: str, adapter: Path | None) -> torch.Tensor:
    from backend.config import ModelConfig
    from backend.policy.model import load_policy

    lm = load_policy(ModelConfig(name=model_name, device="cpu", dtype="fp32"), adapter_dir=adapter)
    with torch.no_grad():
        return lm.model(torch.tensor([PROBE])).logits[0].float()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_model, spread_harness):
    """Two trained steps of the tiny model, at a learning rate that moves it visibly."""
    run = tmp_path_factory.mktemp("export") / "run"
    sets = set_flags(*TINY, f"model.name='{tiny_model}'", f"harness='{spread_harness}'", "evolve.enabled=false",
                     "train.lr=0.05", "eval.every=1")
    p = run_process([sys.executable, "-m", "evotui", "run", "--headless", "--steps", "2", "--run-dir", run,
                     "--quiet", *sets], "the run to export")
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"evotui export {run} --policy" in p.stdout  # the end summary says how
    return run


def test_the_exported_policy_is_the_runs_policy(trained_run, tiny_model):
    p = evotui("export", trained_run, "--policy")
    assert p.returncode == 0, p.stderr
    out = trained_run / "export" / "policy-step-2"
    assert f"written to {out}" in p.stdout and "AutoModelForCausalLM.from_pretrained" in p.stdout
    store = Store.open(trained_run, readonly=True)
    version = store.current_policy_version()
    code = store.harness_version(version["harness_version"])["code"]
    checkpoint = store.checkpoint_of(version)
    store.close()
    meta = json.loads((out / "evotui.json").read_text())
    assert (meta["step"], meta["policy_version"], meta["base_model"]) == (2, version["id"], tiny_model)
    held = meta["heldout"]["validation"]
    assert held["step"] == 2 and held["n"] == 2 and held["ci95"][0] <= held["accuracy"] <= held["ci95"][1]
    assert (out / "harness.py").read_text() == code
    assert not (out / "adapter_config.json").exists()  # merged: a plain model, no peft needed
    exported, = fresh_logits(out)
    assert torch.allclose(exported, policy_logits(tiny_model, checkpoint), atol=1e-4)
    assert (exported - policy_logits(tiny_model, None)).abs().max() > 1e-2  # the adapter is in it


def test_a_step_chooses_the_policy_and_nothing_is_replaced(trained_run, tmp_path):
    p = evotui("export", trained_run, "--policy", "--step", "1", "--out", tmp_path / "one")
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "one" / "evotui.json").read_text())["step"] == 1
    two = trained_run / "export" / "policy-step-2"
    if not two.exists():
        assert evotui("export", trained_run, "--policy").returncode == 0
    p = evotui("export", trained_run, "--policy", "--dtype", "bfloat16", "--out", tmp_path / "half")
    assert p.returncode == 0 and "bfloat16" in p.stdout, p.stderr
    assert json.loads((tmp_path / "half" / "config.json").read_text())["dtype"] == "bfloat16"
    one, full, half = fresh_logits(tmp_path / "one", two, tmp_path / "half")
    assert not torch.allclose(one, full, atol=1e-4)  # step 1's policy, not step 2's
    assert torch.allclose(half, full, atol=0.05)
    before = sorted(f.name for f in (tmp_path / "one").iterdir())
    one_line_error(evotui("export", trained_run, "--policy", "--step", "1", "--out", tmp_path / "one"),
                   "exists; remove it or name another folder with --out")
    assert sorted(f.name for f in (tmp_path / "one").iterdir()) == before
    one_line_error(evotui("export", trained_run, "--policy", "--step", "7"), "step 7 saved no policy",
                   "steps that did: 1-2")
    one_line_error(evotui("export", trained_run, "--step", "1"), "add --policy")
    one_line_error(evotui("export", trained_run, "--dtype", "bfloat16"), "add --policy")
    one_line_error(evotui("export", trained_run, "--policy", "--format", "parquet"), "--format is for the rollouts")


def test_a_policy_without_its_checkpoint_and_a_run_that_never_trained(tmp_path):
    from synthetic_run import build_run

    run = tmp_path / "run"
    store = build_run(run / "run.db", steps=2)  # policy versions whose folders were never written
    one_line_error(evotui("export", run, "--policy"), "the checkpoint of step 2 is not in", "pruned")
    store.set_run(policy_version=None)  # as a run whose every group was dead: the base model
    store.close()
    one_line_error(evotui("export", run, "--policy"), "no trained policy yet")
