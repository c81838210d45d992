"""`train.shared_prefix`: a pass computes each prompt its rows share once (backend/policy/prefix.py).
Its log-probs, loss and LoRA gradient are the full pass's; passes whose rows share no prompt, and
models that keep no cache in training, run the full pass; off by default, nothing changes."""

from __future__ import annotations

import pytest
import torch

from backend.config import TrainConfig, load_config
from backend.policy import grpo, prefix
from backend.policy.grpo import GRPOTrainer, Sample

PROMPT_LENS = [9, 6, 11]  # three groups of unequal prompts
COMPLETION_LENS = [[5, 1, 7, 3], [4, 6, 2, 5], [3, 3, 8, 1]]


def groups(shared: bool = True) -> list[Sample]:
    """Three groups of four rollouts, rows in group order; a tool-output token masked in some
    completions. `shared=False`: every row its own prompt."""
    g = torch.Generator().manual_seed(5)
    out = []
    for p, lens in zip(PROMPT_LENS, COMPLETION_LENS):
        prompt = torch.randint(3, 500, (p,), generator=g).tolist()
        for c in lens:
            mask = [1] * c
            if c > 3:
                mask[2] = 0
            ids = prompt if shared else torch.randint(3, 500, (p,), generator=g).tolist()
            out.append(Sample(ids, torch.randint(3, 500, (c,), generator=g).tolist(), mask,
                              float(torch.randn((), generator=g))))
    return out


@pytest.fixture(scope="module")
def lm(tiny_model):
    from backend.policy.load import load_fast_policy

    cfg = load_config(None, [f"model.name={tiny_model}", "model.device=cpu", "model.threads=1",
                             "model.dtype=fp32"])
    return load_fast_policy(cfg.model, None, seed=cfg.seed)


def trainer(lm, **kw) -> GRPOTrainer:
    kw = {"lr": 1e-3, "micro_batch": 8, "logprob_chunk": 4, "auto_micro_batch": False, **kw}
    return GRPOTrainer(lm.model, lm.tokenizer, TrainConfig(**kw), lm.device)


def full_pass(lm, rows, want_entropy=True):
    ids, att, m, _ = grpo.collate(rows, lm.tokenizer.pad_token_id, "cpu")
    return grpo.token_logprobs(lm.model, ids, att, 4, want_entropy), m, ids.shape[1]


def test_off_by_default():
    assert TrainConfig().shared_prefix is False
    assert load_config(None, ["train.shared_prefix=true"]).train.shared_prefix is True


@pytest.mark.parametrize("rows", [slice(0, 4), slice(0, 12), slice(2, 9)], ids=["one-group", "three", "partial"])
def test_logprobs_and_entropy_equal_the_full_pass(lm, rows):
    """One prompt (the cache expanded), three (gathered), and a pass cut across groups."""
    batch = groups()[rows]
    assert prefix.applies(lm.model, batch)
    with torch.no_grad():
        (lp, ent), m, width = full_pass(lm, batch)
        lp2, ent2 = prefix.token_logprobs(lm.model, batch, width, 4, want_entropy=True)
    assert lp2.shape == lp.shape
    torch.testing.assert_close(lp2 * m, lp * m, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent2 * m, ent * m, rtol=0, atol=1e-5)
    assert (lp2[m == 0] == 0).sum() > 0  # prompt positions are not computed


def test_gradient_reaches_the_lora_weights_through_the_prompt(lm):
    """With the completion tokens' loss alone, the gradient of the shared pass equals the full
    pass's: it includes the path through the cached keys and values (a detached cache would not)."""
    batch = groups()[:4]
    grads = []
    for shared in (False, True):
        lm.model.zero_grad(set_to_none=True)
        (lp, _), m, width = full_pass(lm, batch, want_entropy=False)
        if shared:
            lp, _ = prefix.token_logprobs(lm.model, batch, width, 4)
        (lp * m).sum().backward()
        grads.append({n: p.grad.clone() for n, p in lm.model.named_parameters() if p.requires_grad})
    assert grads[0] and grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-6, msg=n)
    lm.model.zero_grad(set_to_none=True)


def step(lm, shared: bool, rows, **kw):
    """One `GRPOTrainer.step` from the same weights: its stats and LoRA gradients (the weights are
    put back: Adam's first step is about lr * sign(g), so it is no measure of equal gradients)."""
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters() if p.requires_grad}
    t = trainer(lm, shared_prefix=shared, **kw)
    stats = t.step(rows)
    named = [(n, p) for n, p in lm.model.named_parameters() if p.requires_grad]
    grads = {n: p.grad.detach().clone() for n, p in named}
    with torch.no_grad():
        for n, p in named:
            p.copy_(before[n])
    return stats, grads


@pytest.mark.parametrize("kw", [{}, {"kl_coef": 0.1, "ppo_epochs": 2}, {"micro_batch": 5}],
                         ids=["one-pass", "kl-two-epochs", "passes-across-groups"])
def test_a_step_equals_the_full_passes(lm, kw):
    """Same samples, same weights: the same loss, statistics and LoRA gradients (with KL
    and two epochs the old and the reference log-probs come from the shared pass too)."""
    rows = groups()
    plain, g_plain = step(lm, False, rows, **kw)
    ours, g_ours = step(lm, True, rows, **kw)
    for key in ("loss", "kl", "clip_frac", "grad_norm", "entropy"):
        assert ours[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-7), key
    assert ours["tokens"] == plain["tokens"]
    assert g_ours and g_ours.keys() == g_plain.keys()
    assert any(g.abs().sum() > 0 for g in g_ours.values())
    for n in g_ours:
        torch.testing.assert_close(g_ours[n], g_plain[n], rtol=1e-4, atol=1e-7, msg=n)


def test_the_shared_pass_runs_only_where_rows_share_a_prompt(lm, monkeypatch):
    calls = []
    original = prefix.token_logprobs
    monkeypatch.setattr(prefix, "token_logprobs", lambda model, rows, *a, **k: calls.append(len(rows))
                        or original(model, rows, *a, **k))
    trainer(lm, shared_prefix=True, micro_batch=4).step(groups())
    assert calls == [4, 4, 4]
    calls.clear()
    trainer(lm, shared_prefix=True, micro_batch=4).step(groups(shared=False))
    assert calls == []
    trainer(lm, micro_batch=4).step(groups())  # off: never
    assert calls == []


def test_mixed_prompts_fall_back_with_the_same_result(lm):
    rows = groups(shared=False)
    assert not prefix.applies(lm.model, rows)
    plain, g_plain = step(lm, False, rows)
    ours, g_ours = step(lm, True, rows)
    assert ours == plain
    for n in g_ours:
        assert torch.equal(g_ours[n], g_plain[n]), n


def test_a_model_without_a_kept_cache_falls_back(lm, monkeypatch):
    """Gradient checkpointing runs its layers without a cache: the full pass runs."""
    rows = groups()[:4]
    assert prefix.applies(lm.model, rows)
    assert not prefix.applies(lm.model, [Sample([7], [8, 9], [1, 1], 1.0)] * 2)  # a one-token prompt
    layer = grpo.backbone_and_head(lm.model)[0].layers[0]
    monkeypatch.setattr(layer, "gradient_checkpointing", True, raising=False)
    assert not prefix.applies(lm.model, rows)


def test_computed_tokens_count_the_prompt_once():
    rows = groups()[:4]
    assert prefix.computed_tokens(rows) == (PROMPT_LENS[0] - 1) + 4 * (1 + max(COMPLETION_LENS[0]))


@pytest.fixture(scope="module")
def lm_bf16(tiny_model):
    from backend.policy.load import load_fast_policy

    cfg = load_config(None, [f"model.name={tiny_model}", "model.device=cpu", "model.threads=1",
                             "model.dtype=bf16"])
    return load_fast_policy(cfg.model, None, seed=cfg.seed)


def _flat(grads: dict) -> torch.Tensor:
    return torch.cat([g.double().flatten() for _, g in sorted(grads.items())])


def test_in_bf16_the_shared_pass_is_as_close_to_fp32_as_the_full_pass(lm_bf16):
    """bf16 weights, passes of 5 rows (several prompts a pass, groups split over two passes),
    prompts of unequal length: against the full pass in fp32 on the same weights, the shared
    pass's LoRA gradient errs no more than the bf16 full pass's does (both round; neither drops
    a term). A lost or doubled path through the prompt's keys and values errs by tens of percent."""
    rows = groups()
    with torch.no_grad():
        for n, p in lm_bf16.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
    plain = _flat(step(lm_bf16, False, rows, micro_batch=5)[1])
    ours = _flat(step(lm_bf16, True, rows, micro_batch=5)[1])
    base = lm_bf16.model.get_base_model()
    dtypes = {n: p.dtype for n, p in base.named_parameters()}
    base.float()
    try:
        ref = _flat(step(lm_bf16, False, rows, micro_batch=5)[1])
    finally:
        for n, p in base.named_parameters():
            p.data = p.data.to(dtypes[n])
    err_plain, err_ours = float((plain - ref).norm() / ref.norm()), float((ours - ref).norm() / ref.norm())
    assert 0 < err_plain < 0.1
    assert err_ours < 2 * err_plain + 1e-3, (err_ours, err_plain)
