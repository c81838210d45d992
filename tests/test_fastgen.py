"""The fast decode engine against transformers `generate`, on the CPU.

Greedy tokens must match HF generate exactly in fp32: on the real default
model, on a tiny Llama with a trained-looking LoRA adapter, and on a tiny
Qwen2 (q/k/v biases). Log-probs must match the trainer's own.
"""

from __future__ import annotations

import pytest
import torch

from backend.policy.fastgen import FastGenerator, _round_to, why_unsupported
from backend.policy.generate import HF_BATCH, HFGenerator, make_generator


class Tok:
    """Just what the engines use of a tokenizer."""

    eos_token_id = 2
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def tiny(kind="llama", lora=True, seed=0, layers=2):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    kw = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, eos_token_id=2, pad_token_id=0)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kw, rope_theta=500.0))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**kw, use_sliding_window=False))
    model.eval()
    if lora:
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:  # a trained-looking adapter: B is zero at init
                    p.normal_(0, 0.2)
        model.eval()
    return model


PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [20, 21, 22, 23, 24, 25, 26, 27], [3]]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_greedy_matches_hf_generate_with_lora(kind):
    model = tiny(kind)
    hf = HFGenerator(model, Tok(), "cpu").generate(PROMPTS, 12, 0.0)
    fast = FastGenerator(model, Tok(), "cpu").generate(PROMPTS, 12, 0.0)
    assert [g.ids for g in fast] == [g.ids for g in hf]
    assert [g.finish for g in fast] == [g.finish for g in hf]


def _assert_trainer_logprobs(model, prompts, gens):
    """Each generation's log-probs are the trainer's for its tokens (to 1e-4)."""
    from backend.policy.grpo import Sample, collate, token_logprobs

    samples = [Sample(p, g.ids, [1] * len(g.ids), 0.0) for p, g in zip(prompts, gens)]
    ids, att, _, _ = collate(samples, 0, "cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att)
    for k, g in enumerate(gens):
        p = len(prompts[k])
        assert torch.allclose(torch.tensor(g.logprobs), lp[k, p - 1:p - 1 + len(g.ids)], atol=1e-4)


def test_logprobs_match_the_trainer():
    model = tiny()
    _assert_trainer_logprobs(model, PROMPTS, FastGenerator(model, Tok(), "cpu").generate(PROMPTS, 10, temperature=1.0))


def test_refresh_follows_optimizer_steps():
    model = tiny()
    eng = FastGenerator(model, Tok(), "cpu")
    before = [g.ids for g in eng.generate(PROMPTS, 8, 0.0)]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=5.0)
    loss = sum(p.square().sum() for n, p in model.named_parameters() if "lora_B" in n)
    loss.backward()
    opt.step()  # a big step: the greedy continuation changes
    hf = [g.ids for g in HFGenerator(model, Tok(), "cpu").generate(PROMPTS, 8, 0.0)]
    after = [g.ids for g in eng.generate(PROMPTS, 8, 0.0)]  # no refresh(): noticed by itself
    assert after == hf and after != before


def test_sampling_modes_and_stop_handling():
    model = tiny(lora=False)
    eng = FastGenerator(model, Tok(), "cpu")
    greedy = [g.ids for g in eng.generate(PROMPTS, 8, 0.0)]
    assert [g.ids for g in eng.generate(PROMPTS, 8, 1.0, top_p=1e-6)] == greedy  # top-p keeps only the top token
    torch.manual_seed(1)
    full = eng.generate(PROMPTS * 3, 16, 1.5, stop_at_eos=False)
    assert all(len(g.ids) == 16 for g in full)
    torch.manual_seed(1)
    for g in eng.generate(PROMPTS * 3, 16, 1.5):
        assert (g.finish == "stop") == (2 in g.ids)
        assert g.finish == "length" or g.ids.index(2) == len(g.ids) - 1  # nothing after EOS
        assert all(lp <= 0 for lp in g.logprobs) and len(g.logprobs) == len(g.ids)


def test_stochastic_rounding_keeps_small_deltas_on_average():
    w = torch.full((20000,), 0.03125, dtype=torch.float32) + 1e-5  # far below bf16 spacing at 0.03
    r = _round_to(w, torch.bfloat16, torch.Generator().manual_seed(0)).float()
    assert w.to(torch.bfloat16).float().mean() == 0.03125  # round-to-nearest loses the delta
    assert abs(float(r.mean()) - float(w.mean())) < 2e-6


def test_generator_choice_on_cpu():
    model = tiny()
    assert make_generator("auto", model, Tok(), "cpu").name == "hf"
    # the run's model.gen_batch when it fixes one, else plain generate's default (one place: HF_BATCH)
    assert make_generator("hf", model, Tok(), "cpu").batch_size == HF_BATCH
    assert make_generator("hf", model, Tok(), "cpu", batch_size=8).batch_size == 8
    assert make_generator("fast", model, Tok(), "cpu").name == "fast"
    with pytest.raises(ValueError, match="CUDA"):
        make_generator("static", model, Tok(), "cpu")
    from transformers import GPT2Config

    assert "architecture 'gpt2'" in why_unsupported(GPT2Config())


@pytest.mark.slow
def test_greedy_matches_hf_on_the_default_model():
    from backend.config import ModelConfig
    from backend.policy.model import chat_ids, load_base

    model, tok, _, _ = load_base(ModelConfig(dtype="fp32", device="cpu"))  # fp32: the comparison is exact
    model.eval()
    prompts = [chat_ids(tok, [{"role": "user", "content": q}]) for q in ("What is 17 + 25?", "Hi")]
    hf = HFGenerator(model, tok, "cpu").generate(prompts, 12, 0.0)
    fast = FastGenerator(model, tok, "cpu").generate(prompts, 12, 0.0)
    assert [g.ids for g in fast] == [g.ids for g in hf]
    assert fast[0].text == hf[0].text


def test_triton_kernels_on_cpu():
    """The Triton kernels through triton's interpreter, in a fresh process: the interpreter
    must be switched on before triton is first imported."""
    import subprocess
    import sys
    from pathlib import Path

    from backend.policy import fastattn

    if not fastattn.available():
        pytest.skip("triton is not installed (the CUDA install has it)")
    root = Path(__file__).resolve().parent.parent
    code = "import sys; sys.path.insert(0, 'tests'); import test_fastgen as t; t.triton_checks()"
    env = {**__import__("os").environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def triton_checks():
    """Triton decode step == torch decode step; attention reads only each row's live span; the
    sampler draws from softmax(logits / T)."""
    from backend.policy import fastattn

    model = tiny()
    torch_ids = [g.ids for g in FastGenerator(model, Tok(), "cpu", kernels="torch").generate(PROMPTS, 6, 0.0)]
    eng = FastGenerator(model, Tok(), "cpu", kernels="triton")
    assert [g.ids for g in eng.generate(PROMPTS, 6, 0.0)] == torch_ids

    # One step's attention from its projections (RoPE, the cache write at col, attention over
    # [pad, col]) against the same in torch; padding columns (NaN here) are never read.
    torch.manual_seed(0)
    B, Hkv, G, T, D = 3, 2, 3, 80, 64
    Hq = Hkv * G
    qkv = torch.randn(B, (Hq + 2 * Hkv) * D)
    ang = torch.arange(T)[:, None] * (1e-2 ** (torch.arange(D // 2) / (D // 2)))[None]
    cos, sin = ang.cos(), ang.sin()
    kc, vc = torch.randn(B, Hkv, T, D), torch.randn(B, Hkv, T, D)
    pad, col = torch.tensor([0, 5, 70]), torch.tensor([75])
    kc[1, :, :5] = float("nan")

    def roped(x, b):  # x (H, D), interleaved pairs, at row b's position
        rot = torch.polar(torch.ones(D // 2), ang[75 - pad[b]])
        return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rot).flatten(-2)

    def reference(k_cache, v_cache, b):
        """Row b's (Hq, D) attention and its new key and value columns (Hkv, D)."""
        q = roped(qkv[b, :Hq * D].view(Hq, D), b)
        k_new = roped(qkv[b, Hq * D:(Hq + Hkv) * D].view(Hkv, D), b)
        v_new = qkv[b, (Hq + Hkv) * D:].view(Hkv, D)
        k = torch.cat([k_cache[b, :, pad[b]:75], k_new[:, None]], 1)
        v = torch.cat([v_cache[b, :, pad[b]:75], v_new[:, None]], 1)
        return (torch.softmax(q.view(Hkv, G, D) @ k.transpose(1, 2) / 8.0, -1) @ v).view(Hq, D), k_new, v_new

    def attend(k_cache, v_cache, **kw):
        out = torch.empty(B, Hq, D)
        fastattn.rope_attend(qkv, cos, sin, pad, col, k_cache, v_cache, out, Hq, Hkv, D, **kw)
        return out

    k1, v1 = kc.clone(), vc.clone()
    out = attend(k1, v1)
    for b in range(B):
        ref, k_new, v_new = reference(kc, vc, b)
        assert torch.allclose(out[b], ref, atol=1e-3)
        assert torch.allclose(k1[b, :, 75], k_new, atol=1e-5) and torch.equal(v1[b, :, 75], v_new)

    # Rows marked done read no cache (here: NaN) and their output is finite; the others unchanged.
    kd = kc.clone()
    kd[1] = float("nan")
    skipped = attend(kd, vc.clone(), done=torch.tensor([False, True, False]))
    assert torch.equal(skipped[0], out[0]) and torch.equal(skipped[2], out[2]) and skipped[1].isfinite().all()
    # Teacher forcing after a call that left rows done still computes every row.
    tf = {kind: FastGenerator(model, Tok(), "cpu", kernels=kind) for kind in ("torch", "triton")}
    conts = [[4, 5, 6]] * len(PROMPTS)
    for e in tf.values():
        e.generate(PROMPTS, 3, 0.0)
        next(iter(e._ws.values())).done.fill_(True)
    assert torch.allclose(tf["triton"].teacher_forced_logprobs(PROMPTS, conts),
                          tf["torch"].teacher_forced_logprobs(PROMPTS, conts), atol=1e-4)

    # An int8 cache (backend/policy/kvint8.py): the Triton step writes what the torch step writes
    # (to a step where the two kernels' float rounding straddles a rounding boundary), and
    # attention over it is attention over the dequantized values.
    from backend.policy.kvint8 import dequantize, quantize

    engines = {kind: FastGenerator(model, Tok(), "cpu", kernels=kind, kv_int8=True) for kind in ("torch", "triton")}
    ids = {kind: [g.ids for g in e.generate(PROMPTS, 6, 0.0)] for kind, e in engines.items()}
    assert ids["triton"] == ids["torch"]
    (wt,), (wx,) = engines["torch"]._ws.values(), engines["triton"]._ws.values()
    for a, b in ((wt.k, wx.k), (wt.v, wx.v)):
        assert a.dtype == b.dtype == torch.int8
        assert (a.int() - b.int()).abs().max() <= 1 and (a != b).float().mean() < 1e-3
    assert torch.allclose(wt.ks, wx.ks, rtol=1e-5) and torch.allclose(wt.vs, wx.vs, rtol=1e-5)
    (k8, ks), (v8, vs) = quantize(kc.nan_to_num()), quantize(vc)
    out = attend(k8, v8, scales=(ks, vs))
    kd, vd = dequantize(k8, ks, torch.float32), dequantize(v8, vs, torch.float32)
    for b in range(B):
        _, k_new, v_new = reference(kd, vd, b)
        (kq, kqs), (vq, vqs) = quantize(k_new), quantize(v_new)
        assert (k8[b, :, 75].int() - kq.int()).abs().max() <= 1 and torch.equal(v8[b, :, 75], vq)
        assert torch.allclose(ks[b, :, 75], kqs, rtol=1e-5) and torch.allclose(vs[b, :, 75], vqs)
        # the reference with the new column as the cache holds it
        kd[b, :, 75], vd[b, :, 75] = dequantize(kq, kqs, torch.float32), dequantize(vq, vqs, torch.float32)
        q = roped(qkv[b, :Hq * D].view(Hq, D), b)
        k, v = kd[b, :, pad[b]:76], vd[b, :, pad[b]:76]
        want = (torch.softmax(q.view(Hkv, G, D) @ k.transpose(1, 2) / 8.0, -1) @ v).view(Hq, D)
        assert torch.allclose(out[b], want, atol=1e-3)

    # The sampler: frequencies follow softmax(logits / T); log-probs are at temperature 1.
    from backend.policy.fastgen import Workspace
    from backend.policy.shape import Spec

    spec = Spec(1, 8, 1, 1, 8, 8, 8, 1e-5)
    n, V = 600, 8
    ws = Workspace(spec, n, 4, torch.float32, "cpu")
    ws.temp.fill_(2.0)
    ws.seed.fill_(123)
    logits = torch.randn(V).repeat(n, 1)
    fastattn.sample_and_record(logits, ws, torch.tensor([2]), 0, greedy=False, splits=2, block=4)
    toks, lps = ws.out_tok[:, 0], ws.out_lp[:, 0]
    freq = torch.bincount(toks, minlength=V).float() / n
    p = torch.softmax(logits[0] / 2.0, -1)
    assert (freq - p).abs().max() < 0.07  # 600 draws: about 5 standard deviations
    assert torch.allclose(lps, torch.log_softmax(logits[0], -1)[toks], atol=1e-5)
    assert bool(ws.done.any()) and torch.equal(ws.done, toks == 2) and torch.equal(ws.tok, toks)

    # Slices of several blocks, the last one short, tokens of no mass: a chi-square test of the
    # draws against softmax(logits / T) (false-alarm rate 0.001), and greedy takes the argmax.
    from backend.policy.distcheck import chi_square

    n, V = 400, 50
    ws = Workspace(spec, n, 4, torch.float32, "cpu")
    ws.temp.fill_(0.7)
    ws.seed.fill_(7)
    row = torch.randn(V, generator=torch.Generator().manual_seed(3)) * 1.5
    row[[0, 17, 49]] = float("-inf")
    logits = row.repeat(n, 1)
    fastattn.sample_and_record(logits, ws, torch.tensor([1]), 0, greedy=False, splits=2, block=8)
    toks = ws.out_tok[:, 0]
    counts = {int(t): int(c) for t, c in zip(*torch.unique(toks, return_counts=True))}
    assert not {0, 17, 49} & set(counts)
    _, _, p_value = chi_square(counts, torch.softmax(row / 0.7, -1))
    assert p_value > 1e-3, (p_value, counts)
    ws.ci.zero_()
    fastattn.sample_and_record(logits[:4], ws, torch.tensor([1]), 0, greedy=True, splits=2, block=8)
    assert (ws.out_tok[:4, 0] == row.argmax()).all()


def test_unsloth_when_installed_else_peft_with_the_reason():
    from backend.policy.load import unsloth_status

    why = unsloth_status("auto")
    if why is not None:
        assert "unsloth" in why
        return
    from backend.config import ModelConfig
    from backend.policy.load import load_fast_policy

    lm = load_fast_policy(ModelConfig())
    assert lm.trainer == "unsloth" and hasattr(lm.model, "get_base_model")


def test_repeated_prompts_are_prefilled_once_and_decode_as_if_each_were():
    """A GRPO group's rollouts share their prompt; the engine prefills each distinct prompt once
    and copies its cache columns to the rows that repeat it. Greedy tokens still match HF
    generate on the repeated batch, and sampled log-probs the trainer's, row by row."""
    from backend.policy import fastgen

    assert fastgen.distinct_rows([[1, 2], [3], [1, 2]], 4) == ([0, 1, 3], [0, 1, 0, 2])
    model = tiny()
    groups = [p for p in PROMPTS[:3] for _ in range(3)]  # 9 rows in a batch of 16: 3 prompts + padding
    eng = FastGenerator(model, Tok(), "cpu")
    prefilled = []
    prefill = eng._prefill
    eng._prefill = lambda ws, ids, *a: prefilled.append(ids.shape[0]) or prefill(ws, ids, *a)
    fast = eng.generate(groups, 12, 0.0)
    assert sum(prefilled) == 4, "three prompts and one padding row, each prefilled once"
    hf = HFGenerator(model, Tok(), "cpu").generate(groups, 12, 0.0)
    assert [g.ids for g in fast] == [g.ids for g in hf]

    _assert_trainer_logprobs(model, groups, eng.generate(groups, 10, temperature=1.0))


def test_a_triton_kernel_that_fails_to_compile_leaves_the_torch_kernels():
    """The engine's Triton kernels are compiled at their first launch on the user's card: one that
    fails to compile must not end the run. The engine says why and decodes with the torch kernels;
    any other error still propagates."""
    compile_error = type("CompilationError", (Exception,), {"__module__": "triton.compiler.errors"})
    model = tiny()
    want = [g.ids for g in FastGenerator(model, Tok(), "cpu", kernels="torch").generate(PROMPTS, 6, 0.0)]
    eng = FastGenerator(model, Tok(), "cpu", kernels="triton")

    def broken(ws):
        raise compile_error("at 12:8: unsupported operation")

    eng._logits_triton = broken
    with pytest.warns(UserWarning, match="failed to compile"):
        got = [g.ids for g in eng.generate(PROMPTS, 6, 0.0)]
    assert got == want and eng.kernels == eng.sampler == "torch"
    assert "CompilationError: at 12:8" in eng.fallback

    other = FastGenerator(model, Tok(), "cpu", kernels="triton")
    other._logits_triton = lambda ws: 1 / 0
    with pytest.raises(ZeroDivisionError):
        other.generate(PROMPTS, 2, 0.0)
    assert other.fallback is None


def test_the_run_says_once_that_its_engine_left_the_triton_kernels():
    from types import SimpleNamespace

    from backend.loop import Engine

    eng = Engine.__new__(Engine)
    said = []
    eng.say = lambda msg, level="info", step=None: said.append((level, msg))
    eng.generator = SimpleNamespace(fallback=None)
    eng.say_engine_fallback()
    eng.generator.fallback = "a Triton kernel failed to compile (CompilationError: x)"
    eng.say_engine_fallback()
    eng.say_engine_fallback()
    assert said == [("warn", "fast engine: a Triton kernel failed to compile (CompilationError: x); "
                              "decoding with the torch kernels from now on")]
