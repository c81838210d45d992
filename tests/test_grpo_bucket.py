"""Passes by length (`train.length_buckets`) and attention without the padding mask
(`train.causal_only`): the same loss and LoRA gradient as today's passes (in the rollouts'
order, padding masked), less padding, and the same bits on a second run (twins)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from backend.config import TrainConfig
from backend.policy import buckets, memory
from backend.policy.grpo import GRPOTrainer, Sample

from test_grpo_parity import tiny_lora_model

PROMPT_LENS = [3, 9, 4, 2, 6, 3, 12, 5, 2, 7]
COMPLETION_LENS = [14, 2, 6, 1, 5, 4, 2, 13, 3, 8]


def batch() -> list[Sample]:
    g = torch.Generator().manual_seed(3)
    out = []
    for k, (p, c) in enumerate(zip(PROMPT_LENS, COMPLETION_LENS)):
        mask = [1] * c
        if c > 3:
            mask[1] = 0  # a tool-output token inside the completion
        adv = float(torch.randn((), generator=g)) if k % 4 else 0.0
        out.append(Sample(torch.randint(1, 64, (p,), generator=g).tolist(),
                          torch.randint(1, 64, (c,), generator=g).tolist(), mask, adv))
    return out


def run(model, bucketed: bool, **kw) -> tuple[dict, dict, GRPOTrainer]:
    """One step at lr 0 (the weights stay): its stats, the LoRA gradients, the trainer."""
    kw.setdefault("length_buckets", bucketed)
    cfg = TrainConfig(lr=0.0, micro_batch=3, logprob_chunk=4, max_grad_norm=1e9, auto_micro_batch=False, **kw)
    trainer = GRPOTrainer(model, SimpleNamespace(pad_token_id=0), cfg, "cpu")
    stats = trainer.step(batch())
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return stats, grads, trainer


@pytest.fixture(scope="module")
def model():
    return tiny_lora_model()


@pytest.mark.parametrize("new", [{}, {"causal_only": True}], ids=["buckets", "buckets-causal"])
@pytest.mark.parametrize("kw", [{}, {"kl_coef": 0.1, "ppo_epochs": 2}], ids=["one-pass", "kl-two-epochs"])
def test_bucketed_loss_and_gradient_equal_the_unbucketed(model, kw, new):
    """The loss is a sum over passes divided by one count for the step: the partition changes the
    order of additions only (and with KL and two epochs, the old and reference log-probs follow
    the same passes). Without the padding mask a real token sees the same tokens."""
    plain, g_plain, t_plain = run(model, False, **kw)
    ours, g_ours, t_ours = run(model, True, **kw, **new)
    assert t_plain.passes == buckets.in_order(len(PROMPT_LENS), 3)
    assert t_ours.passes != t_plain.passes
    assert ours["loss"] == pytest.approx(plain["loss"], rel=1e-5, abs=1e-7)
    assert ours["entropy"] == pytest.approx(plain["entropy"], rel=1e-5)
    assert ours["tokens"] == plain["tokens"]
    assert g_ours.keys() == g_plain.keys() and g_ours
    for n in g_ours:
        torch.testing.assert_close(g_ours[n], g_plain[n], rtol=1e-4, atol=1e-7, msg=n)
    assert t_ours.last_shape["padded_tokens"] < t_plain.last_shape["padded_tokens"]
    assert t_ours.last_shape["seq_tokens"] == t_plain.last_shape["seq_tokens"]


def test_causal_only_alone_equals_the_masked_passes(model):
    plain, g_plain, _ = run(model, False)
    ours, g_ours, t_ours = run(model, False, causal_only=True)
    assert t_ours.passes == buckets.in_order(len(PROMPT_LENS), 3)
    assert ours["loss"] == pytest.approx(plain["loss"], rel=1e-5, abs=1e-7)
    for n in g_ours:
        torch.testing.assert_close(g_ours[n], g_plain[n], rtol=1e-4, atol=1e-7, msg=n)


@pytest.mark.parametrize("kw", [{}, {"causal_only": True}], ids=["buckets", "buckets-causal"])
def test_bucketed_twins_are_bit_identical(model, kw):
    _, a, _ = run(model, True, **kw)
    _, b, _ = run(model, True, **kw)
    for n in a:
        assert torch.equal(a[n], b[n]), n


def test_by_length_covers_every_row_once_within_each_cap():
    lengths = [7, 3, 9, 9, 1, 4, 7, 2, 8]
    cap = {9: 2, 8: 3}
    passes = buckets.by_length(lengths, lambda T: cap.get(T, 4))
    assert sorted(i for p in passes for i in p) == list(range(len(lengths)))
    for p in passes:
        longest = max(lengths[i] for i in p)
        assert len(p) <= cap.get(longest, 4)
        assert lengths[p[0]] == longest
    flat = [lengths[i] for p in passes for i in p]
    assert flat == sorted(lengths, reverse=True)
    assert passes[0] == [2, 3]  # equal lengths keep their order
    assert buckets.padded_tokens(lengths, passes) < buckets.padded_tokens(lengths, buckets.in_order(9, 4))


def test_cpu_rows_shrink_with_length_within_the_ceiling(model):
    short = memory.cpu_rows(model, 8, ceiling=8, budget=1 << 40)
    assert short == 8
    per = memory.CPU_FACTOR * memory.train_bytes_per_sequence(
        memory.Spec.of(model.get_base_model().config), 100, 64, 4)
    assert memory.cpu_rows(model, 100, ceiling=8, budget=int(per * 3.5)) == 3
    assert memory.cpu_rows(model, 100, ceiling=8, budget=1) == 1
    rows = memory.rows_at_length(model, "cpu", 5, auto=False)
    assert rows(10) == rows(1000) == 5


def test_cuda_plan_gives_short_passes_more_rows_within_the_budget_and_the_cap(model):
    """The CUDA planner, without a card: a fixed budget (as `MemoryPlan` holds after the first step)
    lets 2 rows of the longest length fit a pass; shorter passes take more, never past the
    estimate at their own longest row, and an out-of-memory cap bounds every pass."""
    from backend.policy.grpo import MemoryPlan
    from backend.policy.shape import Spec

    spec = Spec.of(model.get_base_model().config)
    samples = batch()
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    per = [memory.train_bytes_per_sequence(spec, T, 4, 4) for T in range(max(lengths) + 1)]
    budget = int((2.5 * per[max(lengths)] + memory.RESERVE) / memory.MARGIN)
    cfg = TrainConfig(micro_batch=8, logprob_chunk=4, auto_micro_batch=True, length_buckets=True)
    trainer = GRPOTrainer(model, SimpleNamespace(pad_token_id=0), cfg, "cuda")
    trainer.plan = MemoryPlan(budget=budget, share=budget)
    trainer._pick_micro_batch(samples)
    fits = [memory.pick_micro_batch(spec, max(lengths[i] for i in p), budget, 4, 4) for p in trainer.passes]
    assert len(trainer.passes[0]) == 2 and all(len(p) <= f for p, f in zip(trainer.passes, fits))
    assert max(len(p) for p in trainer.passes) > 2 and trainer.rows == max(len(p) for p in trainer.passes)
    assert sorted(i for p in trainer.passes for i in p) == list(range(len(samples)))
    trainer.micro_batch = 1  # the loop's halving after an out-of-memory error: a cap on every pass
    trainer._pick_micro_batch(samples)
    assert [len(p) for p in trainer.passes] == [1] * len(samples)
    trainer.cfg.length_buckets = False  # today's plan: every pass sized for the step's longest row
    trainer.plan.cap = None
    trainer._pick_micro_batch(samples)
    assert trainer.passes == buckets.in_order(len(samples), 2)


def test_causal_only_builds_no_attention_mask(model, monkeypatch):
    """The point of `train.causal_only`: transformers gets no mask to build (SDPA then runs
    `is_causal`, the flash kernel on a GPU); the masked pass builds one."""
    import transformers.models.llama.modeling_llama as llama

    from backend.policy.grpo import token_logprobs

    built = []
    make = llama.create_causal_mask
    monkeypatch.setattr(llama, "create_causal_mask", lambda *a, **k: built.append(make(*a, **k)) or built[-1])
    ids = torch.randint(1, 64, (3, 9), generator=torch.Generator().manual_seed(0))
    att = torch.ones_like(ids)
    att[0, 6:] = att[1, 8:] = 0
    with torch.enable_grad():
        token_logprobs(model, ids, att, 4, right_padded=True)
        token_logprobs(model, ids, att, 4)
    assert len(built) == 2 and built[0] is None and built[1] is not None
