"""The fast engine samples the policy's own distribution (backend/policy/distcheck.py), on the CPU.

Teacher forcing: the fast engine's prefill and decode kernels and the policy's HF
forward see the same tokens; in fp32 their next-token distributions must agree to
rounding (KL per position < 1e-8 nats, fed-token log-probs within 1e-4), on a tiny
Llama with a trained-looking LoRA adapter and on the real default model. An engine
that lost the adapter must fail the same bound. The sampler: a chi-square test of
first-token frequencies against the policy's probabilities, false-alarm rate 0.001.
"""

from __future__ import annotations

import pytest
import torch
from test_fastgen import PROMPTS, Tok, tiny

from backend.policy.distcheck import chi_square, compare, policy_logprobs, teacher_forced
from backend.policy.fastgen import FastGenerator

KL_BOUND = 1e-8  # nats per position, fp32
TOKEN_BOUND = 1e-4  # |log p| of a fed token, fp32
ALPHA = 1e-3  # chi-square false-alarm rate


@pytest.fixture(autouse=True)
def _one_thread():
    """Small matmuls: two OpenMP threads on a shared 2-core machine ran these 10x slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def continuations(eng, prompts, n: int):
    torch.manual_seed(0)
    return [g.ids for g in eng.generate(prompts, n, 1.0, stop_at_eos=False)]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_teacher_forced_distribution_matches_hf_forward(kind):
    model = tiny(kind)
    eng = FastGenerator(model, Tok(), "cpu")
    conts = continuations(eng, PROMPTS, 58)  # up to column 66: past one attention bucket (64)
    a = teacher_forced(model, eng, PROMPTS, conts, rows_per_chunk=3)
    assert a.positions == len(PROMPTS) * 58
    assert a.kl_max < KL_BOUND and a.max_abs_token < TOKEN_BOUND, a.line()


def test_the_check_catches_an_engine_that_lost_the_adapter():
    model = tiny()
    eng = FastGenerator(model, Tok(), "cpu")
    conts = continuations(eng, PROMPTS, 8)
    with torch.no_grad():  # `.data` writes do not bump the version counter: the engine keeps the old merge
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.data.mul_(0.5)
    stale = compare(policy_logprobs(model, PROMPTS, conts, "cpu"), eng.teacher_forced_logprobs(PROMPTS, conts),
                    conts)
    assert stale.kl_max > 100 * KL_BOUND and stale.max_abs_token > 100 * TOKEN_BOUND, stale.line()
    eng.refresh()
    assert teacher_forced(model, eng, PROMPTS, conts).kl_max < KL_BOUND


def test_teacher_forcing_rejects_ragged_continuations():
    eng = FastGenerator(tiny(), Tok(), "cpu")
    with pytest.raises(ValueError, match="one length"):
        eng.teacher_forced_logprobs(PROMPTS[:2], [[5, 6], [5]])


def first_token_counts(eng, prompt, n: int, temperature: float = 1.0) -> dict[int, int]:
    counts: dict[int, int] = {}
    for g in eng.generate([prompt] * n, 1, temperature, stop_at_eos=False):
        counts[g.ids[0]] = counts.get(g.ids[0], 0) + 1
    return counts


def test_sampled_first_tokens_follow_the_policy():
    model = tiny()
    with torch.no_grad():  # a random tiny model is nearly uniform; a real policy is peaked
        model.get_base_model().lm_head.weight.mul_(20)
    eng = FastGenerator(model, Tok(), "cpu", max_batch=512)
    prompt = PROMPTS[0]
    probs = policy_logprobs(model, [prompt], [[0]], "cpu")[0, 0].exp()  # (V,)
    torch.manual_seed(0)
    stat, df, p = chi_square(first_token_counts(eng, prompt, 2048), probs)
    assert p > ALPHA, (stat, df, p)
    # The same test has power: sampling at temperature 1.2 instead of 1 is rejected.
    torch.manual_seed(0)
    _, _, p_hot = chi_square(first_token_counts(eng, prompt, 2048, temperature=1.2), probs)
    assert p_hot < ALPHA


def test_chi_square_pools_rare_tokens_and_matches_known_values():
    probs = torch.tensor([0.5, 0.3, 0.2 - 1e-4, 1e-4])
    stat, df, p = chi_square({0: 50, 1: 30, 2: 20}, probs)
    assert stat == pytest.approx(0.0, abs=1e-3) and df == 2 and p > 0.9  # the rare token folded into a cell
    stat, df, p = chi_square({0: 60, 1: 40}, torch.tensor([0.5, 0.5]))
    assert stat == pytest.approx(4.0) and df == 1 and p == pytest.approx(0.0455, abs=1e-3)  # 2 sigma
    with pytest.raises(ValueError):
        chi_square({}, probs)


@pytest.mark.slow
def test_default_model_distribution_matches_in_fp32():
    from backend.config import ModelConfig
    from backend.policy.model import chat_ids, load_base

    model, tok, _, _ = load_base(ModelConfig(dtype="fp32", device="cpu"))
    prompts = [chat_ids(tok, [{"role": "user", "content": q}]) for q in ("What is 17 + 25?", "Hi")]
    # Any tokens can be fed: a fixed reply (sampling one would cost a generate call).
    conts = [tok("17 + 25 = 42.", add_special_tokens=False)["input_ids"][:5],
             tok("Hello! How can I", add_special_tokens=False)["input_ids"][:5]]
    a = teacher_forced(model, FastGenerator(model, tok, "cpu"), prompts, conts)
    assert a.kl_max < KL_BOUND and a.max_abs_token < TOKEN_BOUND, a.line()
