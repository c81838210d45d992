"""A stop or a pause given to rank 0 of a data-parallel run (2 gloo ranks on the CPU) reaches every
rank at the next batch boundary, and the run ends with its state saved.

The hard case is a stop raised inside the update, while rank 1 trains and is about to sum the
gradients with rank 0: rank 0 must not leave it waiting in the collective (it used to, until
rank 0 gave up on it after launch.JOIN_S and ended it)."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from backend import runs
from backend.ddp.launch import JOIN_S
from backend.ddp.leader import Leader
from backend.store import Store
from engine_waits import CEILING_S, Stalled, either, in_process, run_files, scalar, wait_for
from test_distributed import _cfg

EXTRA = ("train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=4", "eval.n_val=2",
         "eval.n_test=2", "eval.max_new_tokens=4", "eval.every=10", "evolve.enabled=false")


def _stop_at_update(monkeypatch, n: int, how: str) -> dict:
    """At rank 0's `n`-th update: a stop (as SIGTERM asks for it) or a pause command, then the update
    itself, whose first decoder layer on rank 0 meets it. Returns when that was, and the run."""
    seen = {"calls": 0}
    update = Leader.update

    def update_then_meet(self, *args, **kwargs):
        seen["calls"] += 1
        if seen["calls"] == n:
            seen["at"] = time.monotonic()
            if how == "stop":
                self.engine.control.request_stop()
            else:
                self.engine.store.send_command("pause", {})
                self.engine.control._polled = 0.0  # the layer watch reads the table at once
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Leader, "update", update_then_meet)
    return seen


def _run(tiny_model, spread_harness, steps: int, run_dir):
    return runs.start(_cfg(tiny_model, f"steps={steps}", f"harness={spread_harness}", *EXTRA), run_dir, quiet=True)


def test_a_stop_inside_the_update_ends_every_rank_with_the_last_step_saved(tiny_model, spread_harness, monkeypatch):
    seen = _stop_at_update(monkeypatch, 2, "stop")
    run = runs.runs_root() / "ddp-stop"
    _, s = _run(tiny_model, spread_harness, 3, run)
    ended_s = time.monotonic() - seen["at"]
    assert s["status"] == "stopped"
    assert ended_s < JOIN_S / 2, f"the run took {ended_s:.1f} s to end after the stop"  # rank 1 was not waited out
    assert not multiprocessing.active_children()
    store = Store.open(run, create=False)
    try:
        assert store.last_step() == 1 and store.latest_policy_version()["step"] == 1  # step 2 dropped whole
        assert store.run()["status"] == "stopped"
    finally:
        store.close()
    monkeypatch.undo()
    _, s = runs.resume(run, steps=2, quiet=True)  # every rank loads step 1's checkpoint and goes on
    assert s["status"] == "finished" and not multiprocessing.active_children()


@pytest.mark.timeout(CEILING_S)  # a safety net: before the fix the pause was waited out inside the update
def test_a_pause_inside_the_update_waits_at_the_next_step_boundary(tiny_model, spread_harness, monkeypatch):
    """A pause met inside rank 0's update is not waited out there (rank 1 would wait in the collective,
    which has a timeout): the update is taken on every rank, the step committed, and the run waits
    at the boundary, where the operator's stop then ends it."""
    seen = _stop_at_update(monkeypatch, 1, "pause")
    run = runs.runs_root() / "ddp-pause"
    ended = threading.Event()
    operator = threading.Thread(target=_stop_once_paused, args=(run, seen, ended), daemon=True)
    operator.start()
    _, s = _run(tiny_model, spread_harness, 3, run)
    ended.set()
    operator.join()
    assert "stalled" not in seen, seen["stalled"]
    assert s["status"] == "stopped" and seen["calls"] == 1 and not multiprocessing.active_children()
    assert seen["paused_after_step"] == 1  # the pause took effect at the boundary, after the update
    store = Store.open(run, create=False)
    try:
        assert store.last_step() == 1 and store.latest_policy_version()["step"] == 1  # the update was taken
    finally:
        store.close()


def _stop_once_paused(run, seen: dict, ended: threading.Event) -> None:
    """The operator: once the run shows paused, send a stop (through the run's own store). Waits
    while the engine (in this process, rank 1 its child) progresses; on a stall it sends the stop
    anyway, so the run ends and the test reports the stall."""
    try:
        wait_for("the run to show paused", lambda: ended.is_set() or scalar(run, "SELECT paused FROM runs"),
                 progress=either(in_process(), run_files(run)))
    except Stalled as e:
        seen["stalled"] = str(e)
    if ended.is_set():
        return
    store = Store.open(run, create=False)
    try:
        seen["paused_after_step"] = store.last_step()
        store.send_command("stop", {})
    finally:
        store.close()


def test_inside_stop_only_a_pause_is_left_for_later_and_a_stop_raises(tmp_path):
    """`Control.stop_only`, around rank 0's share of a data-parallel update: a waiting pause is
    neither applied nor waited out there (the next checkpoint outside does both); a stop raises."""
    from backend.dispatch import Control, StopRequested
    from test_control import build_run

    store = build_run(tmp_path / "run.db", steps=1)
    store.set_run(status="running")
    control = Control(store)
    store.send_command("pause", {})
    with control.stop_only():
        assert not control.interrupting()
        control.honour()  # returns at once
    assert store.run()["paused"] == 0 and store.pending_commands()
    store.send_command("stop", {})
    control._polled = 0.0  # the next ask reads the table now
    with control.stop_only(), pytest.raises(StopRequested):
        control.honour()
    assert control.stop_requested and not store.pending_commands()  # pause and stop applied, no wait


def test_a_rank_leaves_its_share_of_a_batch_when_rank_0_ends_the_run():
    """Rank 1's side (`Follower.serve`), with a stand-in engine that decodes until it is asked to
    stop: rank 0 sets the stop key mid-batch; the rank leaves at a decode step soon after (the
    store is asked every STOP_POLL_S), replies that it left, and returns at "end"."""
    import pickle
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from backend.ddp.comm import STOP_KEY, STOP_POLL_S, Channel
    from backend.ddp.follower import Follower
    from backend.policy.interrupt import GenerationInterrupted

    store = dist.HashStore()
    step_s = 0.02

    class Decoder:  # an engine with its own kernels: asks `interrupt` between decode steps
        interruptible = True
        steps = 0
        stop_at = None

        def generate(self, prompts, max_new_tokens, temperature, top_p, interrupt):
            while True:
                self.steps += 1
                if self.steps == 3:
                    store.set(STOP_KEY, b"1")  # rank 0 ends the run, mid-batch
                    self.stop_at = self.steps
                if interrupt():
                    raise GenerationInterrupted()
                assert self.steps < 200, "never asked to stop"
                time.sleep(step_s)

    class Tokenizer:  # the rank builds its prompt before decoding: any text and ids do
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return messages[-1]["content"]

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1, 2]}

        def decode(self, ids):
            return "p"

    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=0, world_size=1)
    try:
        rank1 = Follower.__new__(Follower)  # its policy and engine are the stand-ins
        rank1.lm = SimpleNamespace(model=torch.nn.Linear(1, 1), tokenizer=Tokenizer())
        rank1.generator, rank1.params = Decoder(), [torch.zeros(2)]
        rank0 = Channel(store, 0, 2)
        rank0.send("generate", [{"slots": [(0, 0, None, [{"role": "user", "content": "p"}])], "max_new_tokens": 8,
                                 "temperature": 1.0, "top_p": 1.0, "seed": 0, "harness": ("", {})}])
        rank0.send("end", [None])
        rank1.serve(Channel(store, 1, 2))  # returns: it read "end"
    finally:
        dist.destroy_process_group()
    assert pickle.loads(store.get("out/1/1")) == {"left": "generate"}
    assert rank1.generator.steps - rank1.generator.stop_at <= STOP_POLL_S / step_s + 2
