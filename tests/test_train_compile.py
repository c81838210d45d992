"""`train.compile`: the trainer's passes through decoder layers compiled one by one.

On the CPU (inductor needs a C++ compiler) against the eager trainer on the same tiny policy and
rollouts: the same losses and LoRA weights to float rounding, every layer compiled, and passes of
other lengths served by the same graphs instead of a recompilation a layer.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="torch.compile on the CPU needs a C++ compiler")]


def _cfg(compile_: bool):
    return SimpleNamespace(lr=1e-2, clip_eps=0.2, kl_coef=0.0, ppo_epochs=1, micro_batch=8, auto_micro_batch=False,
                           logprob_chunk=64, max_grad_norm=1.0, deterministic=False, compile=compile_,
                           causal_only=True, length_buckets=True)


def _deep(layers: int):
    """test_fastgen's tiny LoRA Llama with more layers (each layer index is where a cache
    object in the layers' arguments would recompile)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                         eos_token_id=2, pad_token_id=0))
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))


def _train(compile_: bool, layers: int | None = None) -> tuple[list[float], dict[str, torch.Tensor], object]:
    from test_fastgen import Tok, tiny

    from backend.policy.grpo import GRPOTrainer, Sample

    model = tiny(seed=0) if layers is None else _deep(layers)
    trainer = GRPOTrainer(model, Tok(), _cfg(compile_), "cpu")
    gen = torch.Generator().manual_seed(3)
    losses = []
    for length in (6, 9, 14):  # three pass lengths: one graph must serve them all
        samples = [Sample(torch.randint(3, 90, (5,), generator=gen).tolist(),
                          torch.randint(3, 90, (length,), generator=gen).tolist(), [1] * length, (-1.0) ** i)
                   for i in range(4)]
        losses.append(float(trainer.step(samples)["loss"]))
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return losses, lora, trainer


def test_compiled_layers_train_as_the_eager_ones_do():
    import torch._dynamo

    torch._dynamo.reset()
    eager_losses, eager_lora, _ = _train(False)
    losses, lora, trainer = _train(True)
    assert losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-6)
    for name, w in eager_lora.items():
        torch.testing.assert_close(lora[name], w, rtol=1e-4, atol=1e-5)
    body = trainer._body()
    assert all(layer._compiled_call_impl is not None for layer in body.layers)


def test_other_pass_lengths_do_not_recompile_each_layer():
    """Dynamic shapes and no KV cache in a training pass: a cache object in a layer's arguments
    made dynamo recompile the layer for every layer index until its limit, then fall back."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    _train(True, layers=10)
    graphs = counters["stats"]["unique_graphs"]
    assert 0 < graphs <= 4, f"{graphs} graphs compiled for a 10-layer model's passes of three lengths"
