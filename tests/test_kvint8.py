"""The fast engine's 8-bit KV cache (`model.kv_int8`, backend/policy/kvint8.py), on the CPU.

A stored value is off by at most half its vector's step; the engine's next-token distributions
move by that rounding and no more (teacher-forced against the policy's forward, fp32: KL per
position under 1e-4 nats, against 1e-8 for the fp32 cache); the scales travel with the values
wherever cache columns are copied (a group's shared prompt, a turn's reused prefix).
"""

from __future__ import annotations

import pytest
import torch
from test_fastgen import PROMPTS, Tok, tiny
from test_fastgen_distribution import _one_thread  # noqa: F401 (autouse: one thread, as there)

from backend.config import ModelConfig
from backend.policy import fastgen
from backend.policy.distcheck import teacher_forced
from backend.policy.fastgen import FastGenerator
from backend.policy.generate import HFGenerator, apply_engine_settings
from backend.policy.kvint8 import dequantize, quantize

INT8_KL_BOUND = 1e-4  # nats per position, fp32 model, int8 cache


def test_a_stored_value_is_off_by_at_most_half_a_step():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, 64, generator=g)
    x[0, 0] = 0.0  # a zero vector
    x[1, 1, 5] = 80.0  # an outlier sets its vector's step
    q, s = quantize(x)
    assert q.dtype == torch.int8 and s.shape == x.shape[:-1]
    assert int(q.abs().max()) == 127 and int(q.min()) >= -127
    err = (dequantize(q, s, torch.float32) - x).abs()
    assert bool((err <= s[..., None] / 2 * (1 + 1e-5) + 1e-7).all())
    assert float(s[0, 0]) == 0.0 and not q[0, 0].any()
    assert float(s[1, 1]) == pytest.approx(80.0 / 127)


def continuations(eng, n: int):
    torch.manual_seed(0)
    return [g.ids for g in eng.generate(PROMPTS, n, 1.0, stop_at_eos=False)]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_the_distribution_moves_by_the_rounding_alone(kind):
    model = tiny(kind)
    eng = FastGenerator(model, Tok(), "cpu", kv_int8=True)
    conts = continuations(FastGenerator(model, Tok(), "cpu"), 58)  # past one attention bucket (64 columns)
    a = teacher_forced(model, eng, PROMPTS, conts, rows_per_chunk=3)
    assert a.kl_max < INT8_KL_BOUND, a.line()
    assert a.kl_max > 1e-10, "the cache is not rounded: is it still in the model's dtype?"
    assert all(ws.k.dtype == torch.int8 and ws.ks is not None for ws in eng._ws.values())


def test_a_groups_shared_prompt_copies_its_scales(monkeypatch):
    """Rows that repeat a prompt get its prefilled columns by copy; decoding must match prefilling
    every row itself, which it cannot where the copy left the scales behind."""
    model = tiny()
    groups = [p for p in PROMPTS[:3] for _ in range(3)]
    shared = FastGenerator(model, Tok(), "cpu", kv_int8=True).generate(groups, 10, 0.0)
    monkeypatch.setattr(fastgen, "distinct_rows", lambda prompts, rows: (list(range(rows)), list(range(rows))))
    each = FastGenerator(model, Tok(), "cpu", kv_int8=True).generate(groups, 10, 0.0)
    assert [g.ids for g in shared] == [g.ids for g in each]
    for x, y in zip(shared, each):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


def test_a_turns_reused_prefix_carries_its_scales():
    """The next turn's batch in another order: each row's cached columns move to another row. Its
    first token (what the moved cache decides) matches a whole prefill's to int8 rounding; the
    later tokens are sampled from it, and a tiny random model's near ties can flip them."""
    model = tiny()
    reuse, plain = FastGenerator(model, Tok(), "cpu", kv_int8=True), FastGenerator(model, Tok(), "cpu", kv_int8=True)
    reuse.kv_reuse = True
    prompts = [[5 + (i * 7 + j) % 80 for j in range(12 + 5 * i)] for i in range(3)]
    first = reuse.generate(prompts, 6, 0.0)
    nxt = [p + g.ids + [40, 41] for p, g in zip(prompts, first)][::-1]
    got, want = reuse.generate(nxt, 6, 0.0), plain.generate(nxt, 6, 0.0)
    assert reuse.reused_tokens == sum(len(p) + len(g.ids) - 1 for p, g in zip(prompts, first))
    assert [g.ids[0] for g in got] == [g.ids[0] for g in want]
    for x, y in zip(got, want):  # decode-written and prefill-written columns round alike, to a step
        assert abs(x.logprobs[0] - y.logprobs[0]) < 1e-2, (x.logprobs, y.logprobs)


def test_the_setting_reaches_the_engine_and_drops_the_other_layout():
    eng = FastGenerator(tiny(), Tok(), "cpu")
    eng.generate(PROMPTS, 2, 0.0)
    assert eng._ws and all(ws.ks is None for ws in eng._ws.values())
    apply_engine_settings(eng, ModelConfig(kv_int8=True), say=lambda *a: None)
    assert eng.kv_int8 and not eng._ws
    eng.generate(PROMPTS, 2, 0.0)
    assert all(ws.k.dtype == torch.int8 for ws in eng._ws.values())
    said = []  # an engine without the setting says so and runs as it is
    apply_engine_settings(HFGenerator(tiny(), Tok(), "cpu"), ModelConfig(kv_int8=True),
                          say=lambda msg, level="info": said.append((level, msg)))
    assert said and said[0][0] == "warn" and "model.kv_int8" in said[0][1]
