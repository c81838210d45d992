"""Responsive control: stop and pause are honoured between generation batches, not after a step.

The engine is the real loop (`Engine.run`, `generate_fn`, the dispatcher's checkpoints) with a
fake slow step: a step of many short generation batches from a stand-in generation engine, so
no model loads. The delays are measured with generous bounds: these are behaviour tests, not
benchmarks (a stop used to wait for the whole step and an evolution round, minutes on the CPU).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from backend.config import RunConfig
from backend.dispatch import Control
from backend.harness.loader import Harness
from backend.loop import Engine
from backend.policy.generate import GenerationInterrupted
from backend.store import Store
from backend.types import Generation
from synthetic_run import add_eval, build_run, outcomes

BATCH_S = 0.05  # one fake generation batch
BATCHES = 30  # one fake step: 1.5 s of generation
BOUND_S = 2.5  # generous: the next batch boundary is BATCH_S away (0.05 s)


class SlowEngine:
    """A generation engine whose batches take BATCH_S; it samples with torch's generator (as
    sampling does), one token per call of its tick."""

    interruptible = False
    batch_size = 8

    def __init__(self, interruptible: bool = False, tokens: int = 10, seconds: float = BATCH_S):
        self.interruptible = interruptible
        self.tokens, self.seconds = tokens, seconds
        self.batches = self.interrupted = 0

    def generate(self, prompts, max_new_tokens, temperature, top_p, interrupt=None):
        ids = []
        for _ in range(self.tokens):
            time.sleep(self.seconds / self.tokens)
            ids.append(int(torch.randint(0, 1000, (1,))))
            if interrupt is not None and interrupt():
                self.interrupted += 1
                raise GenerationInterrupted()
        self.batches += 1
        return [Generation(ids=list(ids), text="", finish="length") for _ in prompts]


@pytest.fixture
def engine(tmp_path):
    store = build_run(tmp_path / "run.db", steps=2)
    add_eval(store, 2, outcomes(8, 4))
    eng = Engine.__new__(Engine)  # the loop without a model: its control path only
    eng.store, eng.run_dir, eng.quiet = store, tmp_path, True
    eng.cfg = RunConfig(steps=3)
    eng.cfg.evolve.enabled = False
    eng.control = Control(store)
    eng.harness_version = store.run()["harness_version"]
    eng.harness = Harness.from_code(store.get("harness_versions", eng.harness_version)["code"])
    eng.engine = SlowEngine()
    eng.samples = []
    eng.train_step = lambda step, progress: _slow_step(eng, step, progress)
    eng._evaluate_and_judge = lambda step: None
    eng.metrics = SimpleNamespace(publish=lambda: None, close=lambda: None)  # no metric sinks
    yield eng
    store.close()


def _slow_step(eng, step, progress):
    progress.phase("generate")
    for _ in range(BATCHES):
        eng.samples += eng.generate_fn([[1, 2, 3]], 8, 1.0, 1.0)
    return {"step": step}


def _later(seconds: float, fn) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    t.start()
    return t


def _send(run_db, verb: str) -> float:
    """Write a command from another connection (as the TUI or the CLI does); returns when."""
    s = Store.open(run_db, create=False)
    s.send_command(verb, {}, source="test")
    s.close()
    return time.monotonic()


def test_stop_is_honoured_at_the_next_generation_batch(engine):
    sent = {}
    _later(0.5, lambda: sent.setdefault("at", _send(engine.store.path, "stop")))
    out = engine.run()
    delay = time.monotonic() - sent["at"]
    assert out == {"status": "stopped"} and delay < BOUND_S, delay
    assert engine.engine.batches < BATCHES  # the step did not run to its end
    run = engine.store.run()
    assert run["status"] == "stopped" and run["pid"] is None and run["activity"] is None
    assert engine.store.last_step() == 2  # nothing of the step in flight was committed
    cmd = engine.store.rows("SELECT status, result FROM commands")[0]
    assert cmd == {"status": "applied", "result": "stopping at the next checkpoint"}


def test_sigterm_stops_at_the_next_batch_with_state_saved(engine):
    before = signal.getsignal(signal.SIGTERM)
    sent = {}
    _later(0.5, lambda: (sent.setdefault("at", time.monotonic()), os.kill(os.getpid(), signal.SIGTERM)))
    out = engine.run()
    assert out == {"status": "stopped"} and time.monotonic() - sent["at"] < BOUND_S
    assert engine.store.run()["status"] == "stopped"
    assert signal.getsignal(signal.SIGTERM) == before  # the engine's handler is gone with it


def test_stop_while_paused_stops_and_a_resumed_run_is_not_left_paused(engine):
    _later(0.3, lambda: _send(engine.store.path, "pause"))
    _later(1.0, lambda: _send(engine.store.path, "stop"))
    assert engine.run() == {"status": "stopped"}
    run = engine.store.run()
    assert run["status"] == "stopped" and run["paused"] == 0


def test_pause_waits_mid_step_and_resume_goes_on(engine):
    seen = {}

    def watch():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s = Store.open(engine.store.path, readonly=True)
            run = s.run()
            s.close()
            if run["status"] == "paused":
                seen["paused_at"], seen["batches"], seen["activity"] = time.monotonic(), engine.engine.batches, \
                    run["activity"]
                return
            time.sleep(0.05)

    sent = {"at": None}
    _later(0.3, lambda: sent.update(at=_send(engine.store.path, "pause")))
    watcher = _later(0.0, watch)
    _later(1.0, lambda: _send(engine.store.path, "resume"))
    out = engine.run()
    watcher.join()
    assert seen["paused_at"] - sent["at"] < BOUND_S and seen["activity"] == "paused"
    assert seen["batches"] < BATCHES  # paused inside the step ...
    assert out == {"status": "finished"} and engine.engine.batches == BATCHES  # ... which then finished
    assert [c["status"] for c in engine.store.rows("SELECT status FROM commands")] == ["applied", "applied"]


def test_a_batch_cut_short_by_a_pause_is_drawn_again_from_the_same_random_state(engine):
    engine.engine = SlowEngine(interruptible=True, tokens=50, seconds=0.5)
    torch.manual_seed(7)
    plain = [engine.generate_fn([[1]], 8, 1.0, 1.0)[0].ids for _ in range(2)]
    torch.manual_seed(7)
    _later(0.1, lambda: _send(engine.store.path, "pause"))  # inside the first batch
    _later(0.8, lambda: _send(engine.store.path, "resume"))
    paused = [engine.generate_fn([[1]], 8, 1.0, 1.0)[0].ids for _ in range(2)]
    assert engine.engine.interrupted == 1 and paused == plain
    assert [c["verb"] for c in engine.store.rows("SELECT verb FROM commands WHERE status = 'applied'")] == \
        ["pause", "resume"]


def test_transformers_generation_is_cut_short_when_asked_and_unchanged_otherwise():
    """The CPU default engine (transformers generate) over a tiny random Llama: an `interrupt` that
    never fires changes no sample; one that fires ends the batch within a token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from backend.policy.generate import HFEngine

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    tok = SimpleNamespace(pad_token_id=0, eos_token_id=1, decode=lambda ids, skip_special_tokens=True: "")
    hf = HFEngine(LlamaForCausalLM(cfg).eval(), tok, "cpu")
    prompts = [[5, 6, 7], [8, 9]]
    torch.manual_seed(1)
    plain = [g.ids for g in hf.generate(prompts, 24, 1.0, 1.0)]
    torch.manual_seed(1)
    assert [g.ids for g in hf.generate(prompts, 24, 1.0, 1.0, interrupt=lambda: False)] == plain
    asked = []
    with pytest.raises(GenerationInterrupted):
        hf.generate(prompts, 24, 1.0, 1.0, interrupt=lambda: asked.append(1) or len(asked) >= 3)
    assert len(asked) == 3
