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
from backend.dispatch import Control, StopRequested
from backend.harness.loader import Harness
from backend.loop import Engine
from backend.policy.generate import GenerationInterrupted
from backend.policy.interrupt import between_layers
from backend.progress import StepProgress
from backend.store import Store
from backend.types import Generation
from engine_waits import in_process, wait_for
from synthetic_run import add_eval, build_run, outcomes

BATCH_S = 0.05  # one fake generation batch
BATCHES = 30  # one fake step: 1.5 s of generation
BOUND_S = 2.5  # generous: the next batch boundary is BATCH_S away (0.05 s)


class SlowGenerator:
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
    eng.progress = StepProgress(eng.cfg.steps, quiet=True, report=eng.control.report)  # as Engine.__init__
    eng.control.on_activity = eng.progress.activity
    eng.harness_version = store.run()["harness_version"]
    eng.harness = Harness.from_code(store.get("harness_versions", eng.harness_version)["code"])
    eng.generator = SlowGenerator()
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
    return {"step": step, "reward_mean": 0.0, "verdict_acc": 0.0, "agreement": 1.0, "dead_group_frac": 0.0,
            "loss": 0.0, "total_ms": 0.0}  # what the terminal's step line shows


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
    assert engine.generator.batches < BATCHES  # the step did not run to its end
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

    done = threading.Event()

    def paused():
        s = Store.open(engine.store.path, readonly=True)
        run = s.run()
        s.close()
        return done.is_set() or (run["status"] == "paused" and run)

    def watch():  # the engine runs in this process: its other threads' CPU is its progress
        run = wait_for("the run to show paused", paused, progress=in_process())
        if run is not True:
            seen["paused_at"], seen["batches"], seen["activity"] = time.monotonic(), engine.generator.batches, \
                run["activity"]

    sent = {"at": None}
    _later(0.3, lambda: sent.update(at=_send(engine.store.path, "pause")))
    watcher = _later(0.0, watch)
    _later(1.0, lambda: _send(engine.store.path, "resume"))
    out = engine.run()
    done.set()
    watcher.join()
    assert seen, "the run never showed paused"
    assert seen["paused_at"] - sent["at"] < BOUND_S and seen["activity"] == "paused"
    assert seen["batches"] < BATCHES  # paused inside the step ...
    assert out == {"status": "finished"} and engine.generator.batches == BATCHES  # ... which then finished
    assert [c["status"] for c in engine.store.rows("SELECT status FROM commands")] == ["applied", "applied"]


class PausingGenerator(SlowGenerator):
    """SlowGenerator whose first batch sends a pause at its first token, as an operator would,
    and a resume once the engine has applied it: the pause lands inside the batch however slow
    the machine is."""

    def __init__(self, run_db, **kw) -> None:
        super().__init__(**kw)
        self.run_db, self.sent = run_db, False

    def generate(self, prompts, max_new_tokens, temperature, top_p, interrupt=None):
        def watch() -> bool:
            if not self.sent:
                self.sent = True
                _send(self.run_db, "pause")
                threading.Thread(target=_resume_once_paused, args=(self.run_db,), daemon=True).start()
            return interrupt() if interrupt is not None else False
        return super().generate(prompts, max_new_tokens, temperature, top_p, interrupt=watch)


def _resume_once_paused(run_db) -> None:
    s = Store.open(run_db, readonly=True)
    try:
        wait_for("the pause to be applied",
                 lambda: s.scalar("SELECT count(*) FROM commands WHERE verb = 'pause' AND status = 'applied'"),
                 progress=in_process())
    finally:
        s.close()
    _send(run_db, "resume")


def test_a_batch_cut_short_by_a_pause_is_drawn_again_from_the_same_random_state(engine):
    engine.generator = SlowGenerator(interruptible=True, tokens=50, seconds=0.5)
    torch.manual_seed(7)
    plain = [engine.generate_fn([[1]], 8, 1.0, 1.0)[0].ids for _ in range(2)]
    engine.generator = PausingGenerator(engine.store.path, interruptible=True, tokens=50, seconds=0.5)
    torch.manual_seed(7)
    paused = [engine.generate_fn([[1]], 8, 1.0, 1.0)[0].ids for _ in range(2)]
    assert engine.generator.interrupted == 1 and paused == plain
    assert [c["verb"] for c in engine.store.rows("SELECT verb FROM commands WHERE status = 'applied'")] == \
        ["pause", "resume"]


def _tiny_llama(layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


class _StopAt:
    """A layer check that raises StopRequested at its n-th call (counting every call)."""

    def __init__(self, n: int | None) -> None:
        self.n, self.calls = n, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.n is not None and self.calls >= self.n:
            raise StopRequested()


def test_a_stop_inside_transformers_generate_is_raised_between_two_layers_of_the_prefill():
    """The CPU default engine (transformers generate) over a tiny random Llama: the layer watch
    changes no sample when it never fires, and a stop asked for inside the prompt's prefill (the
    longest pass there is) leaves before the next decoder layer runs."""
    from backend.policy.generate import HFGenerator

    model = _tiny_llama(layers=2)
    tok = SimpleNamespace(pad_token_id=0, eos_token_id=1, decode=lambda ids, skip_special_tokens=True: "")
    hf = HFGenerator(model, tok, "cpu")
    prompts = [[5, 6, 7], [8, 9]]
    torch.manual_seed(1)
    plain = [g.ids for g in hf.generate(prompts, 24, 1.0, 1.0)]
    never = _StopAt(None)
    with between_layers(model, never):
        torch.manual_seed(1)
        assert [g.ids for g in hf.generate(prompts, 24, 1.0, 1.0)] == plain
    assert never.calls >= 2 * 2  # both layers, the prefill and at least one decode step
    stop = _StopAt(2)  # before the prefill's second layer
    with between_layers(model, stop), pytest.raises(StopRequested):
        hf.generate(prompts, 24, 1.0, 1.0)
    assert stop.calls == 2
    hf.generate(prompts, 4, 1.0, 1.0)  # the hooks left with the block
    assert stop.calls == 2


def test_a_stop_inside_a_training_backward_leaves_the_policy_as_it_was():
    """The trainer's micro-batch: 2 layers forward (2 checks), then the backward pass reaches the
    layers' outputs; a stop raised there drops the update (the optimizer never stepped)."""
    from backend.config import TrainConfig
    from backend.policy.grpo import GRPOTrainer, Sample

    model = _tiny_llama(layers=2)
    cfg = TrainConfig(lr=0.1, micro_batch=4, logprob_chunk=4, auto_micro_batch=False)
    trainer = GRPOTrainer(model, SimpleNamespace(pad_token_id=0), cfg, "cpu")
    samples = [Sample([5, 6, 7], [8, 9, 10], [1, 1, 1], 1.0), Sample([5, 6], [11, 12], [1, 1], -1.0)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stop = _StopAt(3)  # the forward asks twice; the third ask is the backward's
    with between_layers(model, stop), pytest.raises(StopRequested):
        trainer.step(samples)
    assert stop.calls == 3
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert not trainer.opt.state  # no optimizer step was taken
    counted = _StopAt(None)
    with between_layers(model, counted):
        trainer.step(samples)  # uninterrupted, the same update trains
    assert counted.calls == 4 and not all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_inside_a_pass_a_pause_waits_in_place_and_a_stop_raises(tmp_path):
    """`Control.honour`, what the engine's layer watch calls: nothing while no command waits; with
    a pause it waits where it is (the run paused, the activity "paused") until resumed."""
    store = build_run(tmp_path / "run.db", steps=1)
    store.set_run(status="running")
    control = Control(store)
    control.report("step 2/3: train")
    t0 = time.monotonic()
    control.honour()
    assert time.monotonic() - t0 < 0.5
    _send(store.path, "pause")
    control._polled = 0.0  # the next ask reads the table now (it reads at most every POLL_S)
    seen = {}

    def resume_later():
        time.sleep(0.6)
        s = Store.open(store.path, readonly=True)
        seen["run"] = s.run()
        s.close()
        _send(store.path, "resume")

    t = _later(0.0, resume_later)
    t0 = time.monotonic()
    control.honour()
    t.join()
    assert time.monotonic() - t0 >= 0.6
    assert seen["run"]["status"] == "paused" and seen["run"]["activity"] == "paused"
    assert store.run()["activity"] == "step 2/3: train" and store.run()["status"] == "running"
    _send(store.path, "stop")
    control._polled = 0.0
    with pytest.raises(StopRequested):
        control.honour()


def test_the_fast_engine_is_cut_short_between_decode_steps_and_unchanged_otherwise():
    from backend.policy.fastgen import FastGenerator
    from test_fastgen import Tok, tiny

    eng = FastGenerator(tiny(lora=False), Tok(), "cpu")
    prompts = [[5, 6, 7], [8, 9]]
    torch.manual_seed(1)
    plain = [g.ids for g in eng.generate(prompts, 16, 1.0, stop_at_eos=False)]
    torch.manual_seed(1)
    assert [g.ids for g in eng.generate(prompts, 16, 1.0, stop_at_eos=False, interrupt=lambda: False)] == plain
    asked = []
    with pytest.raises(GenerationInterrupted):
        eng.generate(prompts, 16, 1.0, stop_at_eos=False, interrupt=lambda: asked.append(1) or len(asked) >= 3)
    assert len(asked) == 3  # the prefill's chunk, then two decode steps
