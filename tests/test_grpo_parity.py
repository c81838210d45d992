"""Parity with TRL's GRPO on a fixed batch: advantages, loss and LoRA gradient.

The reference side is TRL 1.16.0's formulas transcribed (not imported), so this
runs in CI without TRL; where TRL is installed, `test_against_trl_itself` also
runs TRL's own `nanstd` and `GRPOTrainer._compute_loss`. Lines cited are from
the trl-1.16.0 wheel on PyPI:

- advantages, `trl/trainer/grpo_trainer.py` L2765-2787 (`scale_rewards="group"`, the
  default): A = (r - group mean) / (group std + 1e-4), with the std from
  `trl/trainer/utils.py` `nanstd`, L1037-1044, which applies Bessel's correction;
- per-token loss, `grpo_trainer.py` L3112-3120: -min(ratio * A, clip(ratio, 1 - eps_low,
  1 + eps_high) * A), plus beta * k3 KL (L3098-3104, L3149-3150);
- aggregation, `grpo_trainer.py` L3153-3174: `grpo` averages each sequence over its
  tokens, then the sequences; `bnpo` divides the masked sum by the micro-batch's
  tokens; `dapo` (the default loss_type, `grpo_config.py` L801-802) by
  `num_items_in_batch`, the loss-mask tokens of the whole generation batch (L2497-2498).

Our trainer is `dapo`. Two conventions differ from TRL's defaults, each a named
option measured here: the std (`ADVANTAGE["std"]`: "population" by default, TRL's
"sample" is sqrt(n / (n - 1)) larger, so our advantages are x1.155 at group size 4)
and the loss denominator (`train.loss_denominator`: "live" by default, the tokens
trained on; TRL's is every row of the batch, "batch", so our gradient is larger by
batch tokens / live tokens).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from backend.config import TrainConfig
from backend.harness.semantics import advantages
from backend.policy.grpo import GRPOTrainer, Sample, grpo_loss

GROUP = 4
# Two groups of four: one with a signal, one dead (all rewards 0.1: advantages exactly 0).
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1]]
PROMPT_LENS = [3, 5, 4, 2, 6, 3, 4, 5]
COMPLETION_LENS = [4, 2, 6, 5, 5, 4, 2, 3]  # unequal, so per-sequence and per-token means differ


# ---------------------------------------------------------------- TRL 1.16.0, transcribed
def trl_group_advantages(rewards: torch.Tensor, bessel: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """(G, n) rewards -> (G * n,) advantages: grpo_trainer.py L2765-2787 with nanstd (utils.py L1037-1044).
    `bessel=False` is our "population" convention, for comparison."""
    n = rewards.shape[1]
    mean = rewards.mean(1, keepdim=True)
    var = ((rewards - mean) ** 2).mean(1, keepdim=True)
    if bessel:
        var = var * n / (n - 1)
    return ((rewards - mean) / (var.sqrt() + eps)).reshape(-1)


def trl_per_token_loss(lp, old_lp, adv, eps_low=0.2, eps_high=0.2, ref_lp=None, beta=0.0):
    """(B, T) per-token loss: grpo_trainer.py L3112-3120 (token-level ratio), KL L3098-3104, L3149-3150."""
    coef_1 = torch.exp(lp - old_lp)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    a = adv.unsqueeze(1)
    loss = -torch.min(coef_1 * a, coef_2 * a)
    if beta:
        d = ref_lp - lp
        loss = loss + beta * (torch.exp(d) - d - 1)
    return loss


def trl_aggregate(per_token_loss, mask, loss_type: str, num_items_in_batch=None):
    """grpo_trainer.py L3153-3174, one process, no gradient accumulation."""
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dapo":
        return (per_token_loss * mask).sum() / num_items_in_batch.clamp(min=1.0)
    raise ValueError(loss_type)


# ---------------------------------------------------------------- the fixed batch
def tiny_lora_model():
    """A random-weight Llama (vocab 64, hidden 32, 2 layers) with a LoRA r=4 adapter whose
    A and B are both random, so both get a gradient."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=4, pad_token_id=0))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    return model.float().eval()


def fixed_batch():
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in PROMPT_LENS]
    completions = [torch.randint(1, 64, (n,), generator=g).tolist() for n in COMPLETION_LENS]
    masks = [[1] * n for n in COMPLETION_LENS]
    masks[2][1] = masks[5][1] = 0  # tool-output tokens inside completions: not trained on
    return prompts, completions, masks


def ref_logprobs(model, prompts, completions) -> torch.Tensor:
    """log pi(completion token | prefix), (B, C) right-padded: each sequence alone, no padding,
    the full log-softmax (TRL's temperature 1.0); independent of our chunked, fused path."""
    C = max(len(c) for c in completions)
    rows = []
    for p, c in zip(prompts, completions):
        ids = torch.tensor([p + c])
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        lp = lp.gather(-1, ids[0, 1:, None])[:, 0][len(p) - 1:]  # the completion's tokens
        rows.append(torch.cat([lp, lp.new_zeros(C - len(c))]))
    return torch.stack(rows)


def padded_mask(masks) -> torch.Tensor:
    C = max(len(m) for m in masks)
    return torch.tensor([m + [0] * (C - len(m)) for m in masks], dtype=torch.float32)


def lora_grads(model) -> dict:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def reference(model, prompts, completions, masks, adv, loss_type="dapo", rows=None):
    """TRL's loss and LoRA gradient at the only update of a step (ratio 1: old = new, detached).
    `rows` restricts the loss to those rows; the denominator stays TRL's (see trl_aggregate)."""
    model.zero_grad(set_to_none=True)
    rows = list(range(len(prompts))) if rows is None else rows
    lp = ref_logprobs(model, [prompts[i] for i in rows], [completions[i] for i in rows])
    mask = padded_mask([masks[i] for i in rows])
    ptl = trl_per_token_loss(lp, lp.detach(), adv[rows].float())
    loss = trl_aggregate(ptl, mask, loss_type, num_items_in_batch=mask.sum())
    loss.backward()
    return float(loss.detach()), lora_grads(model)


def ours(model, prompts, completions, masks, adv, rows, denom_tokens=None):
    """Our trainer's loss and gradient (lr 0, so the model is unchanged; no clipping of the
    gradient norm) over `rows`, as the loop hands it the kept rows with non-zero advantage."""
    cfg = TrainConfig(lr=0.0, micro_batch=3, logprob_chunk=4, max_grad_norm=1e9, auto_micro_batch=False)
    trainer = GRPOTrainer(model, SimpleNamespace(pad_token_id=0), cfg, "cpu")
    samples = [Sample(prompts[i], completions[i], masks[i], float(adv[i])) for i in rows]
    stats = trainer.step(samples, denom_tokens=denom_tokens)
    return stats["loss"], lora_grads(model)


def assert_grads_close(a: dict, b: dict, scale: float = 1.0):
    assert a.keys() == b.keys() and a
    for n in a:
        torch.testing.assert_close(a[n], b[n] * scale, rtol=1e-4, atol=1e-7, msg=n)


@pytest.fixture(scope="module")
def setup():
    model = tiny_lora_model()
    prompts, completions, masks = fixed_batch()
    return model, prompts, completions, masks


# ---------------------------------------------------------------- advantages
@pytest.mark.parametrize("eps", [1e-4, 1e-6])
def test_sample_std_equals_trl_and_population_std_is_its_bessel_ratio(eps):
    r = torch.tensor(REWARDS, dtype=torch.float64)
    ours_sample = [a for g in REWARDS for a in advantages(g, "group_std", eps, std="sample")]
    ours_pop = [a for g in REWARDS for a in advantages(g, "group_std", eps, std="population")]
    torch.testing.assert_close(torch.tensor(ours_sample, dtype=torch.float64), trl_group_advantages(r, True, eps),
                               rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(torch.tensor(ours_pop, dtype=torch.float64), trl_group_advantages(r, False, eps),
                               rtol=1e-12, atol=1e-15)
    # the dead group: exactly 0 in both conventions (TRL: 0 / (0 + eps))
    assert ours_pop[GROUP:] == [0.0] * GROUP and ours_sample[GROUP:] == [0.0] * GROUP


def test_population_std_advantages_are_x1155_at_group_4():
    pop = advantages(REWARDS[0], "group_std", 0.0, std="population")
    sample = advantages(REWARDS[0], "group_std", 0.0, std="sample")
    for p, s in zip(pop, sample):
        assert p / s == pytest.approx(math.sqrt(GROUP / (GROUP - 1)), rel=1e-12)  # 1.1547
    # with the default eps the ratio holds to eps / std
    pop = advantages(REWARDS[0], "group_std", 1e-6)
    assert pop[0] / advantages(REWARDS[0], "group_std", 1e-6, std="sample")[0] == pytest.approx(1.1547, abs=1e-4)


# ---------------------------------------------------------------- loss and LoRA gradient
def _advantages(std: str) -> torch.Tensor:
    return torch.tensor([a for g in REWARDS for a in advantages(g, "group_std", 1e-6, std=std)])


def _live(adv) -> list[int]:
    return [i for i, a in enumerate(adv.tolist()) if a != 0.0]


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo"])
def test_batch_denominator_equals_trl(setup, loss_type):
    """Same rows, same advantages (TRL's std), the whole batch as TRL sees it: our "batch"
    convention equals TRL's dapo (and bnpo, which differs from it only under gradient
    accumulation) in loss and in every LoRA gradient."""
    model, prompts, completions, masks = setup
    adv = _advantages("sample")
    live = _live(adv)
    assert len(live) == GROUP  # the dead group's rows are left out of what we train on
    ref_loss, ref_grads = reference(model, prompts, completions, masks, adv, loss_type)
    batch_tokens = float(padded_mask(masks).sum())
    loss, grads = ours(model, prompts, completions, masks, adv, live, denom_tokens=batch_tokens)
    assert loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert_grads_close(grads, ref_grads)


def test_live_denominator_scales_the_gradient_by_the_live_fraction(setup):
    """Our default ("live") equals TRL's dapo over the live rows alone, and is TRL's dapo over the
    whole batch times batch tokens / live tokens (here 29 / 16: the dead group takes the step up by 81%)."""
    model, prompts, completions, masks = setup
    adv = _advantages("sample")
    live = _live(adv)
    ref_loss, ref_grads = reference(model, prompts, completions, masks, adv, "dapo")
    live_ref_loss, live_ref_grads = reference(model, prompts, completions, masks, adv, "dapo", rows=live)
    loss, grads = ours(model, prompts, completions, masks, adv, live)
    batch_tokens = float(padded_mask(masks).sum())
    live_tokens = float(padded_mask([masks[i] for i in live]).sum())
    assert (batch_tokens, live_tokens) == (29.0, 16.0)
    assert loss == pytest.approx(live_ref_loss, rel=1e-5, abs=1e-7)
    assert_grads_close(grads, live_ref_grads)
    assert loss == pytest.approx(ref_loss * batch_tokens / live_tokens, rel=1e-5, abs=1e-7)
    assert_grads_close(grads, ref_grads, scale=batch_tokens / live_tokens)


def test_default_conventions_against_trl_defaults(setup):
    """Both differences at once, as the defaults stand: population std and the live denominator
    give TRL's gradient times sqrt(4 / 3) x batch / live tokens (1.155 x 29 / 16 = 2.09 here)."""
    model, prompts, completions, masks = setup
    ref_loss, ref_grads = reference(model, prompts, completions, masks, _advantages("sample"), "dapo")
    adv = _advantages("population")
    loss, grads = ours(model, prompts, completions, masks, adv, _live(adv))
    ratio = math.sqrt(GROUP / (GROUP - 1)) * 29.0 / 16.0
    assert_grads_close(grads, ref_grads, scale=ratio)
    assert loss == pytest.approx(ref_loss * ratio, rel=1e-4, abs=1e-7)


def test_clipped_surrogate_and_kl_equal_trl_per_token_loss(setup):
    """Away from ratio 1 (old log-probs perturbed, some ratios outside the clip range) and with the
    k3 KL term: our `grpo_loss` equals TRL's per-token loss under the dapo and bnpo aggregations."""
    model, prompts, completions, masks = setup
    with torch.no_grad():
        lp = ref_logprobs(model, prompts, completions)
    g = torch.Generator().manual_seed(2)
    old = lp + 0.5 * torch.randn(lp.shape, generator=g)
    ref = lp + 0.3 * torch.randn(lp.shape, generator=g)
    mask = padded_mask(masks)
    adv = _advantages("sample")
    for beta in (0.0, 0.04):
        new_ours = lp.clone().requires_grad_(True)
        loss, st = grpo_loss(new_ours, old, adv, mask, 0.2, ref_lp=ref, kl_coef=beta)
        loss.backward()
        new_trl = lp.clone().requires_grad_(True)
        ptl = trl_per_token_loss(new_trl, old, adv, ref_lp=ref, beta=beta)
        ref_loss = trl_aggregate(ptl, mask, "dapo", num_items_in_batch=mask.sum())
        ref_loss.backward()
        assert 0 < st["clip_frac"] < 1
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(new_ours.grad, new_trl.grad, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(loss, trl_aggregate(ptl, mask, "bnpo"), rtol=1e-6, atol=1e-7)


def test_grpo_loss_type_differs_unless_lengths_are_equal():
    """TRL's `grpo` aggregation (per-sequence mean, then mean) is ours only when every sequence
    trains on the same number of tokens; with unequal lengths it weights short answers up."""
    g = torch.Generator().manual_seed(3)
    lp = torch.randn(3, 5, generator=g)
    adv = torch.tensor([1.0, -0.5, 0.25])
    ptl = trl_per_token_loss(lp, lp, adv)
    full = torch.ones(3, 5)
    assert float(grpo_loss(lp, lp, adv, full, 0.2)[0]) == pytest.approx(float(trl_aggregate(ptl, full, "grpo")))
    ragged = torch.tensor([[1.0] * 5, [1.0] * 2 + [0.0] * 3, [1.0] + [0.0] * 4])
    assert float(grpo_loss(lp, lp, adv, ragged, 0.2)[0]) != pytest.approx(float(trl_aggregate(ptl, ragged, "grpo")))


# ---------------------------------------------------------------- TRL itself, where installed
def _trl_stub(loss_type: str, lp: torch.Tensor):
    """The attributes `GRPOTrainer._compute_loss` reads (TRL 1.16.0), one process, no accumulation;
    the log-probs come from `ref_logprobs`, so what runs is TRL's loss and aggregation."""
    from collections import defaultdict

    ident = SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction="sum": x,
                            gather_for_metrics=lambda x: x, sync_gradients=True)
    return SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (lp, torch.zeros_like(lp), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=0.0, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.2, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=ident, aux_loss_enabled=False,
        _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1))


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo"])
def test_against_trl_itself(setup, loss_type):
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer as TRLGRPOTrainer
    from trl.trainer.utils import nanstd

    model, prompts, completions, masks = setup
    # advantages: TRL's own std (Bessel-corrected) equals our "sample" convention, to float32
    # precision (nanstd's correction count / (count - 1) is a float32 tensor even for float64 rewards)
    r = torch.tensor(REWARDS, dtype=torch.float64)
    trl_adv = ((r - r.mean(1, keepdim=True)) / (nanstd(r, dim=1, keepdim=True) + 1e-4)).reshape(-1)
    ours_adv = [a for g in REWARDS for a in advantages(g, "group_std", 1e-4, std="sample")]
    torch.testing.assert_close(torch.tensor(ours_adv, dtype=torch.float64), trl_adv, rtol=1e-7, atol=1e-12)
    # loss and gradient: TRL's _compute_loss over the whole batch vs ours over the live rows
    adv = torch.tensor(ours_adv, dtype=torch.float32)
    C = max(COMPLETION_LENS)
    completion_ids = torch.tensor([c + [0] * (C - len(c)) for c in completions])
    mask = padded_mask(masks)
    inputs = {"prompt_ids": torch.zeros(len(prompts), 1, dtype=torch.long),
              "prompt_mask": torch.ones(len(prompts), 1, dtype=torch.long),
              "completion_ids": completion_ids, "completion_mask": mask.long(), "advantages": adv,
              "num_items_in_batch": mask.sum()}
    model.zero_grad(set_to_none=True)
    lp = ref_logprobs(model, prompts, completions)
    trl_loss = TRLGRPOTrainer._compute_loss(_trl_stub(loss_type, lp), model, inputs)
    trl_loss.backward()
    trl_grads = lora_grads(model)
    loss, grads = ours(model, prompts, completions, masks, adv, _live(adv), denom_tokens=float(mask.sum()))
    assert loss == pytest.approx(float(trl_loss), rel=1e-5, abs=1e-7)
    assert_grads_close(grads, trl_grads)
