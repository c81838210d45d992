"""A run's arithmetic is a function of its config, seed and code (backend/policy/determinism.py).

On a GPU shared by six runs, an evolving run and its static twin of one seed split at steps
0-4 with nothing promoted. These tests pin what the CPU can check: no plan reads the card's
free memory, training runs under deterministic algorithms, nothing picks a kernel by timing,
and two identical tiny runs (one with a probe of another batch shape between its steps, as an
evolving run has) end with bit-identical rollouts and weights.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from backend.policy import determinism, memory
from backend.policy.shape import Spec

GIB = 1 << 30
SMOLLM2 = Spec(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152, eps=1e-5)
POLICY = Path(__file__).resolve().parents[1] / "backend" / "policy"


@pytest.fixture
def card(monkeypatch):
    """A fake 80 GiB card whose free memory raises if anyone reads it."""
    state = SimpleNamespace(allocated=2 * GIB)

    def no_free_memory(i=None):
        raise AssertionError("a plan read the card's free memory")

    cuda = torch.cuda
    monkeypatch.setattr(memory, "_SHARES", {})
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "mem_get_info", no_free_memory)
    monkeypatch.setattr(cuda, "memory_allocated", lambda i=None: state.allocated)
    monkeypatch.setattr(cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * GIB))
    monkeypatch.setattr(cuda, "set_per_process_memory_fraction", lambda f, i=None: None)
    return state


@pytest.mark.parametrize("share", [0.0, 0.15])
def test_the_generation_batch_follows_the_card_not_what_is_free_or_held(card, share):
    memory.claim_share("cuda:0", share)
    rows = memory.generation_batch(SMOLLM2, 640, "cuda:0")
    card.allocated = 9 * GIB  # a probe's KV cache, an evaluation's, the optimizer's state
    assert memory.generation_batch(SMOLLM2, 640, "cuda:0") == rows
    per = 640 * SMOLLM2.kv_bytes_per_token() + SMOLLM2.vocab * 32
    want = min(512, int((share or 1.0) * 80 * GIB * memory.GEN_FRACTION // per) // 8 * 8)
    assert rows == want
    # an int8 cache (`model.kv_int8`) holds 68 bytes a vector of 64, not 128: about twice the rows
    long_rows = memory.generation_batch(SMOLLM2, 8000, "cuda:0")
    assert 1.8 * long_rows <= memory.generation_batch(SMOLLM2, 8000, "cuda:0", int8=True) <= 2 * long_rows + 8


def test_the_training_budget_is_fixed_at_the_first_step_even_one_that_trains_nothing(card):
    """Step 1 comes before any evolution round, so twins fix the same budget even when their
    first trained step comes after rounds that left different memory behind."""
    from backend.policy.grpo import GRPOTrainer

    memory.claim_share("cuda:0", 0.25)
    cfg = SimpleNamespace(lr=1e-4, micro_batch=8, auto_micro_batch=True, logprob_chunk=64)
    trainer = GRPOTrainer(torch.nn.Linear(2, 2), None, cfg, "cuda:0")
    assert trainer.step([])["tokens"] == 0  # a step whose groups were all dead
    assert trainer.plan.budget == 20 * GIB - 2 * GIB and trainer.plan.share == 20 * GIB
    card.allocated = 7 * GIB  # a round's probe left a KV cache behind
    trainer._fix_budget()
    assert trainer.plan.budget == 18 * GIB


def test_no_plan_or_kernel_is_chosen_by_timing_or_free_memory():
    """What the policy package runs must not read the card's free memory, autotune, benchmark
    cuDNN algorithms or turn on TF32; torch.compile stays behind off-by-default flags (the fast
    engine's `compile`, the trainer's `train.compile`)."""
    for f in sorted(POLICY.glob("*.py")):
        code = "\n".join(line.split("#")[0] for line in f.read_text().splitlines())
        code = re.sub(r'"""[\s\S]*?"""', "", code)  # docstrings may name what is avoided
        for banned in ("mem_get_info", "autotune", "cudnn.benchmark = True", "allow_tf32 = True",
                       "set_float32_matmul_precision", "time.perf_counter() <", "warn_only=True"):
            assert banned not in code, f"{f.name}: {banned}"
        if f.name not in ("fastgen.py", "grpo.py"):
            assert "torch.compile" not in code, f.name
    from backend.config import TrainConfig
    from backend.policy.fastgen import FastGenerator
    import inspect

    assert inspect.signature(FastGenerator).parameters["compile"].default is False
    assert TrainConfig().compile is False


def test_process_settings():
    determinism.configure()
    s = determinism.settings()
    assert s["cublas_workspace"] in (":4096:8", ":16:8") and not s["cudnn_benchmark"] and not s["tf32_matmul"]


def test_training_passes_run_under_deterministic_algorithms(monkeypatch):
    from test_fastgen import tiny

    from backend.policy import grpo

    seen = []
    real = grpo.token_logprobs

    def spy(*a, **k):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return real(*a, **k)

    monkeypatch.setattr(grpo, "token_logprobs", spy)
    model = tiny()
    for on in (True, False):
        trainer = grpo.GRPOTrainer(model, SimpleNamespace(pad_token_id=0), _cfg(deterministic=on), "cpu")
        trainer.step([grpo.Sample([5, 6, 7], [8, 9, 2], [1, 1, 1], 1.0)])
        assert seen.pop() is on
        assert not torch.are_deterministic_algorithms_enabled()  # restored after the step


def test_top_p_mass_is_exact_enough_and_order_free():
    from backend.policy.fastgen import _mass_before

    p = torch.softmax(torch.randn(4, 500, generator=torch.Generator().manual_seed(0)), -1)
    ref = p.double().cumsum(-1) - p.double()
    assert float((_mass_before(p) - ref).abs().max()) < 1e-9
    with determinism.training():  # an integer cumsum is allowed where a float one on CUDA is not
        _mass_before(p)


def test_the_cpu_micro_batch_is_planned_from_memory():
    """Eight 700-token sequences held about 10 GB of activations in one pass on the CPU."""
    from backend.policy.grpo import Sample

    class Model:  # just what the planner reads: a config and the embedding's dtype
        config = SimpleNamespace(hidden_size=576, num_attention_heads=9, head_dim=64, num_hidden_layers=30,
                                 num_key_value_heads=3, intermediate_size=1536, vocab_size=49152, rms_norm_eps=1e-5)

        def get_input_embeddings(self):
            return torch.nn.Embedding(2, 2)  # float32

    def rows(length: int, n: int = 16) -> int:
        return memory.cpu_micro_batch(Model(), [Sample([1] * 10, [2] * (length - 10), [1], 1.0)] * n, 8)

    assert rows(700) == 1 and rows(32) == 8
    assert rows(100) == 4  # 5 fit: 4 passes of 4 rows, not 5 + 5 + 5 + 1
    assert memory.cpu_micro_batch(Model(), [], 8) == 8
    per = memory.CPU_FACTOR * memory.train_bytes_per_sequence(SMOLLM2, 150, 64, 4)
    assert per * rows(150) <= memory.CPU_TRAIN_BYTES


def _cfg(**kw):
    base = dict(lr=1e-2, clip_eps=0.2, kl_coef=0.0, ppo_epochs=1, micro_batch=8, auto_micro_batch=True,
                logprob_chunk=64, max_grad_norm=1.0, deterministic=True)
    return SimpleNamespace(**{**base, **kw})


def _run(probe: bool) -> tuple[list, dict]:
    """Two steps of rollouts and updates on a tiny policy; `probe`: a round's probe between them."""
    from test_fastgen import PROMPTS, Tok, tiny

    from backend.policy.fastgen import FastGenerator
    from backend.policy.grpo import GRPOTrainer, Sample

    model = tiny(seed=0)
    engine = FastGenerator(model, Tok(), "cpu")
    trainer = GRPOTrainer(model, Tok(), _cfg(), "cpu")
    rollouts = []
    for step in (1, 2):
        torch.manual_seed(1000 + step)  # the loop's per-step seed
        gens = engine.generate(PROMPTS * 3, 6, temperature=1.0)
        rollouts.append([g.ids for g in gens])
        adv = [(-1.0) ** i for i in range(len(gens))]
        trainer.step([Sample(p, g.ids, [1] * len(g.ids), a) for p, g, a in zip(PROMPTS * 3, gens, adv)])
        if probe:
            with engine.scratch_shapes():
                torch.manual_seed(7)
                engine.generate(PROMPTS[:2], 9, temperature=1.0, top_p=0.9)
    return rollouts, {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def test_two_identical_runs_are_bit_identical_and_a_probe_between_steps_changes_nothing():
    ref_rollouts, ref_weights = _run(probe=False)
    for probe in (False, True):
        rollouts, weights = _run(probe)
        assert rollouts == ref_rollouts
        assert weights.keys() == ref_weights.keys()
        assert all(torch.equal(weights[n], ref_weights[n]) for n in weights)
    from test_fastgen import tiny

    start = {n: p for n, p in tiny(seed=0).named_parameters() if "lora_" in n}
    assert any(not torch.equal(ref_weights[n], start[n]) for n in start)  # the steps did train


def test_pass_tokens_sets_how_many_tokens_a_pass_holds(card):
    """`train.pass_tokens`: the plan's ceiling on a pass's rows x length, below the memory budget."""
    rows = {t: memory.pick_micro_batch(SMOLLM2, 200, 140 * GIB, max_tokens=t) for t in (32768, 65536)}
    assert rows[32768] == 32768 // 200 and rows[65536] == 65536 // 200  # the budget holds both
    assert memory.pick_micro_batch(SMOLLM2, 200, 2 * GIB, max_tokens=65536) < 32768 // 200  # memory binds first


def test_the_trainer_plans_its_passes_with_its_pass_tokens(card, monkeypatch):
    from test_fastgen import tiny

    from backend.policy import grpo

    seen = []
    real = memory.rows_at_length

    def spy(*a, **k):
        seen.append(k.get("max_tokens"))
        return real(*a, **k)

    monkeypatch.setattr(memory, "rows_at_length", spy)
    trainer = grpo.GRPOTrainer(tiny(), None, _cfg(length_buckets=True, pass_tokens=65536), "cuda:0")
    trainer._plan_by_length([grpo.Sample([1] * 100, [2] * 100, [1] * 100, 1.0)] * 4)
    assert seen == [65536]
