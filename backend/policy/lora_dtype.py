"""LoRA in the base model's dtype (`train.lora_base_dtype`).

The adapters keep fp32 weights on a bf16 base (`model.load_policy`): the optimizer's updates are
too small for bf16 weights to hold. peft then casts every LoRA module's input activation to fp32
for the adapter's two matmuls and the sum back to bf16: with seven target modules a layer, a
tokens x width copy each way per module, forward and backward.

Here the adapter's weights are cast to the activation's dtype instead (rank x width: small), so
the activations stay bf16 and the fp32 weights remain what the optimizer updates (their gradient
flows back through the cast). The product is rounded to bf16 where peft kept fp32, so an update
differs slightly from the fp32 path; in fp32 the two are the same operations. Modules this does
not cover (adapters disabled or merged, mixed adapter batches, DoRA and other variants, a bias
on lora_B) run peft's own forward.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def _forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if args or kwargs or self.disable_adapters or self.merged or self.lora_variant:
        return type(self).forward(self, x, *args, **kwargs)
    result = self.base_layer(x)
    for name in self.active_adapters:
        if name not in self.lora_A:
            continue
        a, b = self.lora_A[name], self.lora_B[name]
        if b.bias is not None or a.bias is not None:
            return type(self).forward(self, x)
        h = F.linear(self.lora_dropout[name](x), a.weight.to(x.dtype))
        result = result + F.linear(h, b.weight.to(x.dtype)) * self.scaling[name]
    return result


def use(model, on: bool) -> int:
    """Give every peft LoRA Linear of `model` the forward above (`on`) or peft's own back; returns
    how many modules run the forward above (0 for a model without peft LoRA layers, e.g. Unsloth's)."""
    from peft.tuners.lora.layer import Linear

    n = 0
    for m in model.modules():
        if isinstance(m, Linear):
            if on:
                m.forward = types.MethodType(_forward, m)
                n += 1
            else:
                m.__dict__.pop("forward", None)
    return n
