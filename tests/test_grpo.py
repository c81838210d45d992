"""GRPO loss on tiny batches: gradient sign, clipping, KL, chunked log-probs."""

import torch

from backend.policy.grpo import collate, grpo_loss, Sample


def test_gradient_sign_follows_advantage():
    lp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.ones(2, 3)
    loss, _ = grpo_loss(lp, lp.detach(), torch.tensor([1.0, -1.0]), mask, 0.2)
    loss.backward()
    # minimising the loss raises log-probs of positive-advantage tokens, lowers the others
    assert (lp.grad[0] < 0).all() and (lp.grad[1] > 0).all()


def test_clipping_stops_gradient_beyond_the_trust_region():
    old = torch.zeros(1, 2)
    new = torch.tensor([[0.5, -0.5]], requires_grad=True)  # ratios e^0.5 = 1.65 and e^-0.5 = 0.61
    loss, st = grpo_loss(new, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2)
    loss.backward()
    assert new.grad[0, 0] == 0  # A > 0 and ratio > 1 + eps: clipped, no push further
    assert new.grad[0, 1] < 0  # A > 0 and ratio < 1 - eps: unclipped side still pulls up
    assert st["clip_frac"] == 1.0


def test_mask_excludes_tokens_and_kl_is_nonnegative():
    new = torch.tensor([[0.1, 0.3]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0]])
    loss, st = grpo_loss(new, new.detach(), torch.tensor([1.0]), mask, 0.2, ref_lp=torch.zeros(1, 2), kl_coef=0.1)
    loss.backward()
    assert new.grad[0, 1] == 0 and st["kl"] >= 0


def test_collate_aligns_loss_mask_with_completion():
    ids, att, m, adv = collate([Sample([5, 6, 7], [8, 9], [1, 0], 0.5), Sample([5], [8], [1], -1.0)], 0, "cpu")
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 0, 0, 0]]
    # target j predicts token j+1: completion tokens 8 and 9 are targets 2 and 3
    assert m.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0]]
    assert adv.tolist() == [0.5, -1.0]


def test_chunked_logprobs_match_full_softmax():
    from transformers import LlamaConfig, LlamaForCausalLM

    from backend.policy.grpo import token_logprobs

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    ids = torch.randint(0, 50, (2, 9))
    att = torch.ones_like(ids)
    full = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    with torch.no_grad():
        chunked, ent = token_logprobs(model, ids, att, chunk=3, want_entropy=True)
    assert torch.allclose(full, chunked, atol=1e-5) and (ent > 0).all()
    lp, _ = token_logprobs(model, ids, att, chunk=4)  # with grad: checkpointed chunks backprop
    lp.sum().backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
