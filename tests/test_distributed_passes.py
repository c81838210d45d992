"""The train step's passes, as a data-parallel rank and one process run them: the host reads the
device once per epoch (not once per micro-batch), and the step reports the micro-batches it ran."""

from __future__ import annotations

import torch

from backend.config import load_config


def _trainer(model: str, micro: int):
    from backend.policy.grpo import GRPOTrainer
    from backend.policy.load import load_fast_policy

    cfg = load_config(None, [f"model.name={model}", "model.device=cpu", "model.threads=1",
                             f"train.micro_batch={micro}", "train.lr=1e-3"])
    lm = load_fast_policy(cfg.model, None, seed=cfg.seed)
    return GRPOTrainer(lm.model, lm.tokenizer, cfg.train, lm.device)


def _samples():
    from backend.policy.grpo import Sample

    lens = [(3, 5), (6, 2), (4, 7), (2, 3)]
    return [Sample(list(range(5, 5 + p)), list(range(40, 40 + c)), [1] * c, adv)
            for (p, c), adv in zip(lens, [0.7, -0.3, 1.1, -0.9])]


def _counting_reads(monkeypatch) -> list[str]:
    """Every read of a tensor's value back to the host (on CUDA each waits for the device)."""
    reads: list[str] = []
    for name in ("__float__", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **k):
            reads.append(_name)
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_the_step_reads_the_device_once_per_epoch_whatever_the_micro_batches(tiny_model, monkeypatch):
    """A read per micro-batch would make each wait for its forward and backward before the next is
    queued, so the host's work would add to the device's instead of overlapping it. Four
    micro-batches of one read back exactly as much as one of four, and give the same update."""
    results = {}
    for micro in (1, 4):
        trainer = _trainer(tiny_model, micro)
        with monkeypatch.context() as m:
            reads = _counting_reads(m)
            stats = trainer.step(_samples())
        results[micro] = (len(reads), stats, {n: p.detach().clone() for n, p in trainer.model.named_parameters()
                                              if p.requires_grad})
        assert trainer.last_shape["micro_batches"] == 4 // micro
    (reads_1, stats_1, after_1), (reads_4, stats_4, after_4) = results[1], results[4]
    assert reads_1 == reads_4
    for key in ("loss", "kl", "clip_frac", "grad_norm", "entropy"):
        assert abs(stats_1[key] - stats_4[key]) < 1e-5, key
    assert stats_1["tokens"] == stats_4["tokens"] == 17
    assert all(torch.allclose(after_1[n], after_4[n], atol=1e-6) for n in after_1)


def test_the_step_reports_its_micro_batches(tiny_model):
    trainer = _trainer(tiny_model, 3)
    trainer.step(_samples())
    shape = trainer.last_shape
    lengths = [8, 8, 11, 5]  # prompt + completion of each sample
    assert (shape["rows"], shape["micro_batch"], shape["micro_batches"]) == (4, 3, 2)
    assert shape["seq_tokens"] == sum(lengths)
    assert shape["padded_tokens"] == 3 * 11 + 1 * 5  # each micro-batch padded to its own longest
    assert shape["max_len"] == 11 and len(shape["pass_ms"]) == 2
    assert shape["issue_ms"] >= sum(shape["pass_ms"]) - 0.05 and shape["wait_ms"] >= 0
