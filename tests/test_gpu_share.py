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
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "mem_get_info", lambda i=None: (state.free, 80 * GIB))
    monkeypatch.setattr(cuda, "memory_allocated", lambda i=None: state.allocated)
    monkeypatch.setattr(cuda, "memory_reserved", lambda i=None: state.reserved)
    monkeypatch.setattr(cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * GIB))
    monkeypatch.setattr(cuda, "set_per_process_memory_fraction", lambda f, i=None: state.fractions.append((f, i)))
    return state


def micro_batch() -> int:
    return memory.pick_micro_batch(SMOLLM2, 384, memory.free_bytes("cuda:0"))


def test_without_a_share_the_plan_reads_the_cards_size_not_its_free_memory(card):
    """Free memory moved with the neighbours, and two runs of one seed planned different batches."""
    alone = micro_batch()
    assert memory.free_bytes("cuda:0") == 80 * GIB - 2 * GIB
    for free in (70 * GIB, 12 * GIB, 0):  # other runs took most of the card
        card.free = free
        assert micro_batch() == alone


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
    shape) that its static twin never allocates, and a resumed process holds other things than
    the original did: the budget is fixed at a run's first plan, so the twins keep planning alike."""
    memory.claim_share("cuda:0", 0.25)
    budget = memory.plan_budget("cuda:0")
    assert budget == 20 * GIB - 2 * GIB
    twin = memory.pick_micro_batch(SMOLLM2, 384, budget)
    card.allocated = 6 * GIB  # the evolving run after its first round's probe
    assert memory.pick_micro_batch(SMOLLM2, 384, memory.free_bytes("cuda:0")) < twin  # what it read before
    card.free = 0  # and the neighbours do not count
    assert memory.pick_micro_batch(SMOLLM2, 384, budget) == twin


def test_without_a_share_the_budget_is_the_whole_card(card):
    assert memory.share_bytes("cuda:0") is None
    assert memory.plan_budget("cuda:0") == 80 * GIB - 2 * GIB
    card.free = 1 * GIB
    assert memory.plan_budget("cuda:0") == 80 * GIB - 2 * GIB
    assert memory.plan_budget("cpu") is None


def _trainer(card, monkeypatch, planned: int):
    """A GRPOTrainer on a faked card whose memory estimate always asks for `planned` rows;
    records the budget each plan was made from."""
    from backend.policy.grpo import GRPOTrainer

    budgets = []

    def auto(model, samples, device, chunk, fallback, budget=None, max_tokens=memory.MAX_TOKENS):
        budgets.append(budget)
        return planned

    monkeypatch.setattr(memory, "auto_micro_batch", auto)
    cfg = SimpleNamespace(lr=1e-4, micro_batch=8, auto_micro_batch=True, logprob_chunk=64)
    trainer = GRPOTrainer(torch.nn.Linear(2, 2), None, cfg, "cuda:0")
    return trainer, budgets


def test_an_out_of_memory_error_caps_every_later_plan_of_the_run(card, monkeypatch):
    """The trainer plans its micro-batch at the start of every step, the retry after an
    out-of-memory error included: the halving was planned away again and the same step failed
    thousands of times in a row.
    Halved once, it stays at most that for the run, and the retry succeeds."""
    from backend.loop import Engine

    memory.claim_share("cuda:0", 0.25)
    trainer, budgets = _trainer(card, monkeypatch, planned=104)
    tried, said = [], []

    def step():
        trainer._pick_micro_batch(["a sample"])
        tried.append(trainer.micro_batch)
        if trainer.micro_batch > 52 or len(tried) > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        return "ok"

    loop = SimpleNamespace(say=lambda msg, level="info": said.append(msg), store=None)
    assert Engine.with_oom_retry(loop, step, trainer, "micro_batch") == "ok"
    assert tried == [104, 52] and said == ["GPU out of memory: lowering micro_batch from 104 to 52"]
    card.allocated = 9 * GIB  # later steps: the budget stays the first plan's, the cap stays
    trainer._pick_micro_batch(["a sample"])
    assert trainer.micro_batch == 52 and set(budgets) == {18 * GIB}


def test_a_resumed_run_plans_from_the_budget_its_first_plan_fixed(card, monkeypatch, tmp_path):
    """The plan is saved with each checkpoint and read back on resume under the same share;
    under another share (a card of another size, or more runs on it) it is planned afresh."""
    from backend.policy import checkpoint as ckpt
    from backend.policy.grpo import MemoryPlan

    memory.claim_share("cuda:0", 0.25)
    trainer, budgets = _trainer(card, monkeypatch, planned=104)
    trainer._pick_micro_batch(["a sample"])
    trainer.micro_batch = 64  # an out-of-memory error halved it
    saved = trainer.saved_state()
    path = tmp_path / "ckpt"
    path.mkdir()
    torch.save({"optimizer": None, "torch_rng": torch.get_rng_state(), "py_rng": __import__("random").getstate(),
                **saved}, path / "trainer_state.pt")

    card.allocated = 1 * GIB  # the resumed process holds less than the original did at its first plan
    again, budgets_again = _trainer(card, monkeypatch, planned=104)
    assert again.resume(path)
    again._pick_micro_batch(["a sample"])
    assert again.plan == trainer.plan and budgets_again == [18 * GIB] and again.micro_batch == 64
    assert ckpt.load_trainer_state(path, None)["memory_plan"] == {"budget": 18 * GIB, "share": 20 * GIB, "cap": 64}

    memory.claim_share("cuda:0", 0.5)  # resumed with fewer runs on the card
    other, _ = _trainer(card, monkeypatch, planned=104)
    assert not other.resume(path)  # the loop warns
    assert other.plan == MemoryPlan()
    other._pick_micro_batch(["a sample"])
    assert other.plan.budget == 40 * GIB - 1 * GIB and other.micro_batch == 104


def test_a_rounds_probe_shapes_are_freed_after_it():
    """The fast engine keeps a KV cache and graphs per batch shape; what a round's probes made
    (another shape than training's) is freed when the round ends, so an evolving run holds
    what its static twin holds."""
    from test_fastgen import PROMPTS, Tok, tiny

    from backend.evolve_hooks import scratch_shapes
    from backend.policy.fastgen import FastGenerator
    from backend.policy.generate import HFGenerator

    model = tiny()
    gen = FastGenerator(model, Tok(), "cpu")
    training = gen.generate(PROMPTS * 4, 4, temperature=0.0)  # 16 rows
    shapes = set(gen._ws)
    with scratch_shapes(gen):
        gen.generate(PROMPTS[:2], 4, temperature=0.0)  # a probe: 8 rows, a shape of its own
        gen.generate(PROMPTS * 4, 4, temperature=0.0)  # the training shape, used again inside
        assert set(gen._ws) == shapes | {8}
    assert set(gen._ws) == shapes == {16}
    assert [g.ids for g in gen.generate(PROMPTS * 4, 4, temperature=0.0)] == [g.ids for g in training]
    with scratch_shapes(HFGenerator(model, Tok(), "cpu")):  # no cache per shape: nothing to free
        pass
