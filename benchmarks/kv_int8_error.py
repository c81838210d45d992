"""How far the 8-bit KV cache (`model.kv_int8`) moves the embedded model's distributions, and
which of keys and values moves it.

    python benchmarks/kv_int8_error.py [--prompts 8] [--length 32] [--device cpu] [--dtype fp32]

The default model with a trained-looking LoRA adapter (backend/tools/bench_engines.py); each
prompt (the default math harness's) gets `--length` sampled tokens, and the fast engine's
teacher-forced next-token distributions along them are compared with the policy's forward
(backend/policy/distcheck.py), for the cache in the model's dtype, the int8 cache, and two
halves of it: keys alone rounded to int8, values alone. One row each: KL(policy || engine) per
position, its mean over each prompt's positions averaged over the prompts with a 95% t-interval
(the prompts are the independent units: n = `--prompts`), its largest value, and the largest
|log p| difference on a fed token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def half_int8(which: str):
    """A workspace whose cache holds `which` ("k" or "v") as the int8 cache would (rounded,
    stored dequantized), the other in the model's dtype."""
    from backend.policy.fastgen import Workspace
    from backend.policy.kvint8 import dequantize, quantize

    def rounded(x, kind):
        return dequantize(*quantize(x), x.dtype) if kind == which else x

    class Half(Workspace):
        def put(self, li, rows, cols, k, v):
            super().put(li, rows, cols, rounded(k, "k"), rounded(v, "v"))

        def put_column(self, li, k, v):
            super().put_column(li, rounded(k, "k"), rounded(v, "v"))

    return Half


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", help="the model's dtype: fp32 or bf16")
    a = p.parse_args(argv)
    import torch

    from backend.config import ModelConfig
    from backend.policy import fastgen
    from backend.policy.distcheck import teacher_forced
    from backend.policy.fastgen import FastGenerator
    from backend.policy.model import load_policy
    from backend.tools.bench import math_prompts
    from backend.tools.bench_common import interval
    from backend.tools.bench_engines import trained_looking

    lm = load_policy(ModelConfig(dtype=a.dtype, device=a.device))
    model, tok, dev = lm.model, lm.tokenizer, lm.device
    trained_looking(model)
    prompts = math_prompts(tok, a.prompts)
    torch.manual_seed(0)
    conts = [g.ids for g in FastGenerator(model, tok, dev).generate(prompts, a.length, 1.0, stop_at_eos=False)]
    plain = fastgen.Workspace
    print(f"{'cache':<24} {'KL/position, mean over prompts':<36} {'KL max':>9} {'max |dlogp|':>12}")
    for name, kw, ws_class in (("model's dtype", {}, plain), ("int8 (model.kv_int8)", {"kv_int8": True}, plain),
                               ("keys int8, values not", {}, half_int8("k")),
                               ("values int8, keys not", {}, half_int8("v"))):
        fastgen.Workspace = ws_class
        try:
            eng = FastGenerator(model, tok, dev, **kw)
            per = [teacher_forced(model, eng, [p], [c]) for p, c in zip(prompts, conts)]
        finally:
            fastgen.Workspace = plain
        kl = interval([ag.kl_mean for ag in per], "{:.2e}")  # prompts are the independent units
        print(f"{name:<24} {kl:<36} {max(ag.kl_max for ag in per):>9.2e} "
              f"{max(ag.max_abs_token for ag in per):>12.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
