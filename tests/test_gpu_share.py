"""A run's batch sizes follow its own memory, never its neighbours' (docs/results/gpu-trajectory-split/).

On a card shared by several runs, the free memory the planner read moved with
the other runs, so two runs of one seed could plan different micro-batches or
meet an out-of-memory error apart, and then train on different arithmetic.
`model.gpu_share` bounds a run to its slice of the card and the planner reads
that slice. CUDA is faked here: only the bookkeeping is under test.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from backend.config import ConfigError, load_config
from backend.policy import memory
from backend.policy.shape import Spec

GIB = 1 << 30
SMOLLM2 = Spec(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152, eps=1e-5)


@pytest.fixture
def card(monkeypatch):
    """A fake 80 GiB card: `card.free` is what the other processes leave, `card.allocated` this one's."""
    state = SimpleNamespace(free=60 * GIB, allocated=2 * GIB, reserved=3 * GIB, fractions=[])
    cuda = torch.cuda
    monkeypatch.setattr(memory, "_SHARES", {})
    monkeypatch.setattr(memory, "_FOOTPRINT", {})
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "mem_get_info", lambda i=None: (state.free, 80 * GIB))
    monkeypatch.setattr(cuda, "memory_allocated", lambda i=None: state.allocated)
    monkeypatch.setattr(cuda, "memory_reserved", lambda i=None: state.reserved)
    monkeypatch.setattr(cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * GIB))
    monkeypatch.setattr(cuda, "set_per_process_memory_fraction", lambda f, i=None: state.fractions.append((f, i)))
    return state


def micro_batch() -> int:
    return memory.pick_micro_batch(SMOLLM2, 384, memory.free_bytes("cuda:0"))


def test_without_a_share_the_plan_moves_with_the_neighbours(card):
    alone = micro_batch()
    card.free = 12 * GIB  # three other runs took most of the card
    crowded = micro_batch()
    assert crowded < alone  # the instability the share removes


def test_with_a_share_the_plan_depends_on_this_process_only(card):
    memory.claim_share("cuda:0", 0.25)
    assert card.fractions == [(0.25, 0)]  # the caching allocator stops at the share
    assert memory.free_bytes("cuda") == 20 * GIB - 2 * GIB
    alone = micro_batch()
    for free in (70 * GIB, 12 * GIB, 0):
        card.free = free
        assert micro_batch() == alone
    card.allocated = 19 * GIB  # its own allocations still count
    assert memory.free_bytes("cuda:0") == 1 * GIB
    card.allocated = 30 * GIB
    assert memory.free_bytes("cuda:0") == 0


def test_no_share_and_the_cpu_claim_nothing(card):
    memory.claim_share("cuda:0", 0.0)
    memory.claim_share("cpu", 0.5)
    assert card.fractions == [] and memory._SHARES == {}


@pytest.mark.parametrize("share", ["-0.1", "1.5", "nan"])
def test_a_share_outside_0_1_is_refused(share):
    with pytest.raises(ConfigError, match="model.gpu_share must be between 0"):
        load_config(None, [f"model.gpu_share={share}"])


def test_a_share_in_range_is_kept():
    assert load_config(None, ["model.gpu_share=0.22"]).model.gpu_share == 0.22


def test_an_out_of_memory_error_halves_the_fast_engines_batch():
    """`Engine.with_oom_retry` lowers `holder.batch_size`; the fast engine had no such attribute, so
    an out-of-memory error in its decode stopped the run as if already at one row."""
    from test_fastgen import PROMPTS, Tok, tiny

    from backend.loop import Engine
    from backend.policy.fastgen import FastGenerator

    gen = FastGenerator(tiny(), Tok(), "cpu")
    assert gen.batch_size == 64  # the CPU's auto batch
    said, calls = [], []

    def decode():
        calls.append(gen.batch_size)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        return gen.generate(PROMPTS * 3, 4, temperature=0.0)

    loop = SimpleNamespace(say=lambda msg, level="info": said.append(msg), store=None)
    out = Engine.with_oom_retry(loop, decode, gen, "batch_size")
    assert calls == [64, 32] and gen.max_batch == 32 and len(out) == 12
    assert said == ["GPU out of memory: lowering batch_size from 64 to 32"]
    assert [g.ids for g in out] == [g.ids for g in FastGenerator(tiny(), Tok(), "cpu").generate(
        PROMPTS * 3, 4, temperature=0.0)]  # greedy rows do not depend on the batch they share


def test_with_a_share_the_training_plan_does_not_follow_the_runs_own_history(card):
    """An evolving run's round leaves memory behind (a probe's KV cache of another batch
    shape) that its static twin never allocates: after its first plan, a run's micro-batch
    depends on the batch alone, so the twins keep planning alike."""
    memory.claim_share("cuda:0", 0.25)
    plan = lambda: memory.pick_micro_batch(SMOLLM2, 384, memory.training_bytes("cuda:0"))  # noqa: E731
    twin = plan()
    card.allocated = 4 * GIB  # the evolving run after its first round's probe
    assert plan() == twin
    assert memory.pick_micro_batch(SMOLLM2, 384, memory.free_bytes("cuda:0")) < twin  # what it read before
    card.free = 0  # and the neighbours still do not count
    assert plan() == twin


def test_without_a_share_the_training_plan_reads_the_card(card):
    assert memory.training_bytes("cuda:0") == memory.free_bytes("cuda:0")
