"""`train.compile`: the trainer's passes through decoder layers compiled one by one.

On the CPU (inductor needs a C++ compiler) against the eager trainer on the same tiny policy and
rollouts: the same losses and LoRA weights to float rounding, every layer compiled, and passes of
other lengths served by the same graphs instead of a recompilation a layer.
"""

from __future__ import annotations

import shutil

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="torch.compile on the CPU needs a C++ compiler")]


def _train(compile_: bool, layers: int = 2) -> tuple[list[float], dict[str, torch.Tensor], object]:
    from test_determinism import _cfg
    from test_fastgen import Tok, tiny

    from backend.policy.grpo import GRPOTrainer, Sample

    model = tiny(seed=0, layers=layers)  # each layer index is where a cache object would recompile
    trainer = GRPOTrainer(model, Tok(), _cfg(auto_micro_batch=False, deterministic=False, compile=compile_,
                                             causal_only=True, length_buckets=True), "cpu")
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
    trainer.release_compiled()  # a bench's next variant on the same model runs eager again
    assert all(layer._compiled_call_impl is None for layer in body.layers)
    assert trainer._compiled is None


def test_other_pass_lengths_do_not_recompile_each_layer():
    """Dynamic shapes and no KV cache in a training pass: a cache object in a layer's arguments
    made dynamo recompile the layer for every layer index until its limit, then fall back."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    _, _, trainer = _train(True, layers=10)
    graphs = counters["stats"]["unique_graphs"]
    assert 0 < graphs <= 4, f"{graphs} graphs compiled for a 10-layer model's passes of three lengths"

    # 9 rows at `train.micro_batch` 8 plan passes of 8 and 1. A compiled layer specializes a size
    # of 1, so that pass would compile every layer twice more; it borrows a row instead (7 and 2).
    from backend.policy.grpo import Sample

    gen = torch.Generator().manual_seed(5)
    nine = [Sample(torch.randint(3, 90, (5,), generator=gen).tolist(), c, [1] * len(c), (-1.0) ** i)
            for i in range(9) for c in [torch.randint(3, 90, (6 + i % 4,), generator=gen).tolist()]]
    trainer.step(nine)
    assert sorted(len(p) for p in trainer.passes) == [2, 7]
    assert counters["stats"]["unique_graphs"] == graphs, "a step with a one-row pass compiled new graphs"





def test_pass_lengths_are_multiples_of_eight():
    """On CUDA a compiled layer guards on whether a pass's length is a multiple of 8 (Inductor's
    alignment check), so steps mixing both kinds compiled every layer again (17 s on an H100).
    Under `train.compile` every pass is right-padded to a multiple of 8, and the memory plan sizes
    the passes as padded; eager passes are not padded."""
    from test_determinism import _cfg
    from test_fastgen import Tok, tiny

    from backend.policy.grpo import GRPOTrainer, Sample

    gen = torch.Generator().manual_seed(7)
    eleven = [Sample(torch.randint(3, 90, (5,), generator=gen).tolist(),
                     torch.randint(3, 90, (6,), generator=gen).tolist(), [1] * 6, (-1.0) ** i) for i in range(4)]
    for compile_, width in ((True, 16), (False, 11)):
        trainer = GRPOTrainer(tiny(layers=1), Tok(), _cfg(auto_micro_batch=False, deterministic=False,
                                                          compile=compile_, causal_only=True,
                                                          length_buckets=True), "cpu")
        trainer._pick_micro_batch(eleven)  # the step's passes, as `step` plans them
        assert [t[0].shape[1] for _, t in trainer._batches(eleven)] == [width]
