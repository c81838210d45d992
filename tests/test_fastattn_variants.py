"""fastattn.decode_attention's opt-in variants (kv_first, split<S>) on the CPU, through triton's
interpreter: each against a torch softmax over the row's span, kv_first bit for bit against the
base kernel, split<S> the same on every call and with empty chunks (a span of fewer blocks than
S) free of NaN; and an engine on split4 generates the tokens of the default kernels.

The checks run in a fresh process: the interpreter must be switched on before triton is first
imported (as in test_fastgen.test_triton_kernels_on_cpu).
"""

from __future__ import annotations

import pytest
import torch


def in_interpreter(check: str) -> None:
    """Run this module's function `check` in a fresh process under TRITON_INTERPRET=1."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from backend.policy import fastattn

    if not fastattn.available():
        pytest.skip("triton is not installed (the CUDA install has it)")
    root = Path(__file__).resolve().parent.parent
    code = f"import sys; sys.path.insert(0, 'tests'); import test_fastattn_variants as t; t.{check}()"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def test_variant_names():
    from backend.policy.fastattn import VARIANTS, splits_of

    assert [splits_of(v) for v in VARIANTS] == [1, 1, 2, 4, 8]
    assert splits_of("split3") == 3
    for bad in ("split", "split1", "splitx", "kv-first", ""):
        with pytest.raises(ValueError, match="attention variant"):
            splits_of(bad)


def test_variants_match_the_reference_and_the_base_kernel():
    in_interpreter("kernel_checks")


def test_engine_on_split4_generates_the_same_tokens():
    in_interpreter("engine_checks")


def reference(q, kc, vc, pad, col: int, hkv: int):
    """Softmax attention of each row's q over its keys [pad, col], in float64: (B, Hq, D)."""
    B, hq, D = q.shape
    out = torch.empty(B, hq, D, dtype=torch.float64)
    for b in range(B):
        k, v = kc[b, :, pad[b]:col + 1].double(), vc[b, :, pad[b]:col + 1].double()  # (Hkv, S, D)
        s = q[b].double().view(hkv, hq // hkv, D) @ k.transpose(1, 2) * D ** -0.5
        out[b] = (torch.softmax(s, -1) @ v).reshape(hq, D)
    return out


def kernel_checks():
    from backend.policy import fastattn

    B, Hq, Hkv, T, D, block = 3, 4, 2, 40, 16, 16
    pad = torch.tensor([0, 7, 25])
    variants = ["base", "kv_first", "split2", "split3", "split4", "split8"]
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(B, Hq, D, generator=gen).to(dtype)
        kc, vc = (torch.randn(B, Hkv, T, D, generator=gen).to(dtype) for _ in range(2))
        for col in (25, 39):  # col 25: row 2's span is the one key 25 (one block: most chunks empty)
            kn, vn = kc.clone(), vc.clone()
            for b in range(B):  # columns outside [pad, col] must never reach the result
                kn[b, :, :pad[b]] = vn[b, :, :pad[b]] = float("nan")
                kn[b, :, col + 1:] = vn[b, :, col + 1:] = float("nan")
            ref = reference(q, kn, vn, pad, col, Hkv)
            outs = {}
            for v in variants:
                runs = []
                for _ in range(2):
                    out = torch.full_like(q, float("nan"))  # every element must be written
                    fastattn.decode_attention(q, kn, vn, pad, torch.tensor([col]), out, Hkv, block, variant=v)
                    runs.append(out)
                assert torch.equal(runs[0], runs[1]), (v, dtype, col)  # the same bits on every call
                assert bool(torch.isfinite(runs[0]).all()), (v, dtype, col)
                err = (runs[0].double() - ref).abs().max().item()
                assert err < tol, (v, dtype, col, err)
                outs[v] = runs[0]
            assert torch.equal(outs["kv_first"], outs["base"]), (dtype, col)
            out = torch.empty_like(q)  # a pipelining depth is a launch option: the same arithmetic
            fastattn.decode_attention(q, kn, vn, pad, torch.tensor([col]), out, Hkv, block, variant="kv_first",
                                      stages=2)
            assert torch.equal(out, outs["base"]), (dtype, col)


def engine_checks():
    """split4 (a short span: one block, three empty chunks) generates the default kernels' tokens."""
    from test_fastgen import PROMPTS, Tok, tiny

    from backend.policy import fastattn
    from backend.policy.fastgen import FastGenerator

    model = tiny(layers=1)
    # The torch kernels stand in for the base Triton kernel (test_fastgen checks the two agree) at a
    # fraction of the interpreter's time.
    want = [g.ids for g in FastGenerator(model, Tok(), "cpu", kernels="torch").generate(PROMPTS, 6, 0.0)]
    seen = []
    run = fastattn.decode_attention
    fastattn.decode_attention = lambda *a, **kw: (seen.append(kw.get("variant")), run(*a, **kw))[1]
    eng = FastGenerator(model, Tok(), "cpu", kernels="triton", attn_variant="split4")
    assert [g.ids for g in eng.generate(PROMPTS, 6, 0.0)] == want
    assert seen and set(seen) == {"split4"}  # the engine ran the variant it was given
    with pytest.raises(ValueError, match="attention variant"):
        FastGenerator(model, Tok(), "cpu", attn_variant="split1")
