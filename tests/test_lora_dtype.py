"""`train.lora_base_dtype`: LoRA's matmuls in the base's dtype. In fp32 it is peft's forward
exactly (the same operations); on a bf16 base the loss and the LoRA gradient stay close to
peft's fp32 adapter path while no activation is cast to fp32; off again, peft's own forward."""

from __future__ import annotations

import pytest
import torch

from tiny_llama import save_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


def _policy(name: str, dtype: str):
    from backend.config import load_config
    from backend.policy.model import load_policy

    lm = load_policy(load_config(None, [f"model.name={name}", "model.device=cpu", f"model.dtype={dtype}"]).model)
    torch.manual_seed(0)
    with torch.no_grad():
        for n, p in lm.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)  # lora_B starts at zero: give the adapter a product to round
    return lm


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _ids(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 1000, (3, 24), generator=g)


def test_in_fp32_it_is_peft_forward_exactly(tiny):
    from backend.policy import lora_dtype

    lm = _policy(tiny, "fp32")
    ids = _ids()
    loss_a, grads_a = _loss_and_grads(lm.model, ids)
    assert lora_dtype.use(lm.model, True) == 2 * 7  # 2 layers x 7 target modules
    loss_b, grads_b = _loss_and_grads(lm.model, ids)
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and all(torch.equal(grads_a[k], grads_b[k]) for k in grads_a)
    assert lora_dtype.use(lm.model, False) == 0
    assert all("forward" not in m.__dict__ for m in lm.model.modules())


def test_on_a_bf16_base_it_stays_close_and_casts_no_activation_to_fp32(tiny):
    from backend.policy import lora_dtype

    lm = _policy(tiny, "bf16")
    assert lm.dtype == torch.bfloat16
    ids = _ids()
    loss_a, grads_a = _loss_and_grads(lm.model, ids)
    lora_dtype.use(lm.model, True)
    seen = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
             for n, m in lm.model.named_modules() if n.endswith("lora_A.default")]
    loss_b, grads_b = _loss_and_grads(lm.model, ids)
    for h in hooks:
        h.remove()
    assert not seen, "the adapter's nn.Linear ran: peft's path casts the activation to fp32"
    assert all(g.dtype == torch.float32 for g in grads_b.values())  # the optimizer's weights stay fp32
    assert abs(loss_a.item() - loss_b.item()) < 1e-2 * abs(loss_a.item())
    num = sum(((grads_a[k] - grads_b[k]) ** 2).sum() for k in grads_a) ** 0.5
    den = sum((grads_a[k] ** 2).sum() for k in grads_a) ** 0.5
    assert 0 < num / den < 0.1, f"|dgrad|/|grad| {num / den:.4f}"
    lora_dtype.use(lm.model, False)
    loss_c, _ = _loss_and_grads(lm.model, ids)
    assert torch.equal(loss_a, loss_c)
