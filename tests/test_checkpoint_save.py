"""A checkpoint written by `checkpoint.save` loads back exactly: the adapter through peft's own
loader, the optimizer's state through `load_trainer_state`, into a fresh model and optimizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiny_llama import save_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


def _trained(name: str, seed: int):
    from backend.config import load_config
    from backend.policy.model import load_policy

    cfg = load_config(None, [f"model.name={name}", "model.device=cpu", "model.dtype=fp32"])
    torch.manual_seed(seed)
    lm = load_policy(cfg.model)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn_like(p))  # lora_B starts at zero: make every tensor distinct
    opt = torch.optim.AdamW(params, lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        sum((p ** 3).sum() for p in params).backward()
        opt.step()
    return cfg, lm, opt


def test_checkpoint_loads_back_the_same_adapter_and_optimizer(tiny, tmp_path):
    from backend.policy import checkpoint as ckpt
    from backend.policy.model import load_policy

    cfg, lm, opt = _trained(tiny, 0)
    path = ckpt.save(tmp_path, 3, lm.model, opt, extra={"note": "x"}, state={"memory_plan": {"rows": 4}})
    assert json.loads((path / "meta.json").read_text()) == {"step": 3, "note": "x"}
    assert json.loads((path / "adapter_config.json").read_text())["r"] == cfg.model.lora_r

    loaded = load_policy(cfg.model, adapter_dir=path)  # peft's PeftModel.from_pretrained
    want = {n: p for n, p in lm.model.named_parameters() if p.requires_grad}
    got = {n: p for n, p in loaded.model.named_parameters() if p.requires_grad}
    assert want.keys() == got.keys()
    assert all(torch.equal(want[n], got[n]) for n in want)

    _, other, opt2 = _trained(tiny, 1)  # a different state, overwritten by the load
    saved = ckpt.load_trainer_state(path, opt2)
    assert saved["memory_plan"] == {"rows": 4}
    a, b = opt.state_dict(), opt2.state_dict()
    assert a["state"].keys() == b["state"].keys()
    for slot, per in a["state"].items():
        for key, v in per.items():
            assert torch.equal(v, b["state"][slot][key]), (slot, key)


def test_the_files_are_those_peft_and_torch_write(tiny, tmp_path):
    """The adapter's tensors and config as peft's `save_pretrained` writes them, byte for byte where
    peft is deterministic; the optimizer's tensors beside `trainer_state.pt`. A checkpoint written
    the older way (the whole optimizer pickled in `trainer_state.pt`) still loads."""
    from safetensors.torch import load_file

    from backend.policy import checkpoint as ckpt

    _, lm, opt = _trained(tiny, 0)
    path = ckpt.save(tmp_path / "new", 1, lm.model, opt)
    lm.model.save_pretrained(str(tmp_path / "peft"))
    ours, theirs = load_file(str(path / "adapter_model.safetensors")), load_file(str(tmp_path / "peft" /
                                                                                   "adapter_model.safetensors"))
    assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert (path / "adapter_config.json").read_bytes() == (tmp_path / "peft" / "adapter_config.json").read_bytes()
    moments = load_file(str(path / "optimizer_tensors.safetensors"))
    assert len(moments) == 2 * len(opt.state_dict()["state"])  # AdamW: exp_avg and exp_avg_sq a parameter

    old = tmp_path / "old"
    old.mkdir()
    torch.save({"optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(), "py_rng": __import__(
        "random").getstate()}, old / "trainer_state.pt")
    _, _, opt2 = _trained(tiny, 1)
    ckpt.load_trainer_state(old, opt2)
    assert all(torch.equal(v, opt2.state_dict()["state"][slot][key])
               for slot, per in opt.state_dict()["state"].items() for key, v in per.items())


def test_a_writing_thread_shortens_the_switch_interval_and_restores_it(tmp_path):
    """While `begin_save`'s thread writes, the interpreter hands its lock back within
    `WRITER_SWITCH_S` (the next step's decode loop waits on it); the interval is Python's again
    once the last writer ends, also when a write fails."""
    import sys
    import threading

    from backend.policy import checkpoint as ckpt

    seen, release = [], threading.Event()

    class Model:
        def __init__(self, fail=False):
            self.fail = fail

        def save_pretrained(self, path):
            Path(path).mkdir(parents=True)
            seen.append(sys.getswitchinterval())
            release.wait(10)
            if self.fail:
                raise OSError("disk full")

    before = sys.getswitchinterval()
    assert before > ckpt.WRITER_SWITCH_S
    first = ckpt.begin_save(tmp_path / "a", 1, Model(), None)
    second = ckpt.begin_save(tmp_path / "b", 2, Model(fail=True), None)  # two writers at once (two runs)
    while len(seen) < 2:
        threading.Event().wait(0.01)
    release.set()
    assert first.result(10) == ckpt.checkpoint_dir(tmp_path / "a", 1)
    with pytest.raises(OSError):
        second.result(10)
    assert seen == [pytest.approx(ckpt.WRITER_SWITCH_S)] * 2
    assert sys.getswitchinterval() == before
