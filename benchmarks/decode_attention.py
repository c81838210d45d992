"""The fast engine's decode attention (backend/policy/fastattn.py `decode_attention`): its variants
at the engine's shape, in one run.

SmolLM2-135M at batch 512: q (512, 9, 64) bf16 against a K and a V cache (512, 3, 336, 64) bf16,
rows left-padded 0..20 (a fixed seed), the cache ending at column 69, 197 or 325 (the first, middle
and last of 256 new tokens after a 69-token prompt). A variant's --calls calls cycle over --layers
caches, as the engine's layers do (one cache alone would sit in L2), and are captured in one CUDA
graph, as the engine's step is (so split's workspace is allocated under capture, as in the engine);
the variants' graphs replay in turn, --repeats times, timed with CUDA events. Prints microseconds a
call (mean +- 95% interval over the repeats), the live K+V span read (columns [pad, col] of every
row and KV head) in GB/s, base's time over the variant's (> 1: faster) and the largest difference
of the variant's output from base's. A variant may name Triton's pipelining depth: `kv_first@4`.

    .venv/bin/python benchmarks/decode_attention.py
    .venv/bin/python benchmarks/decode_attention.py --variants base,base@1,kv_first@4,split4 --cols 325
    .venv/bin/python benchmarks/decode_attention.py --device cpu  # a smoke check: interpreter, tiny sizes
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_variant(spec: str) -> tuple[str, int | None]:
    """'split4' -> ('split4', None); 'kv_first@4' -> ('kv_first', 4) (Triton's num_stages)."""
    name, _, stages = spec.partition("@")
    return name, int(stages) if stages else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: triton's interpreter (TRITON_INTERPRET=1) at tiny sizes, a smoke check")
    ap.add_argument("--variants", default="base,kv_first,split2,split4,split8",
                    help="comma-separated: base, kv_first, split<S>, each optionally @<num_stages>")
    ap.add_argument("--cols", default="69,197,325", help="cache ends (the last live column) to time at")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--layers", type=int, default=30, help="caches the calls cycle over")
    ap.add_argument("--calls", type=int, default=200, help="calls in one timed graph")
    ap.add_argument("--repeats", type=int, default=10, help="timed replays of each variant's graph")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cpu = args.device == "cpu"
    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported
        args.batch, args.layers, args.calls, args.repeats = 4, 2, 2, 2
        args.cols = ",".join(c for c in args.cols.split(",") if int(c) < 48) or "9,25,41"
    import torch

    from backend.policy import fastattn
    from benchmarks.code_step import interval

    if not fastattn.available():
        sys.exit("decode_attention: triton is not installed")
    if not cpu and not torch.cuda.is_available():
        sys.exit("decode_attention: CUDA is not available (--device cpu runs a smoke check in triton's interpreter)")
    dev = torch.device(args.device)
    B, Hq, Hkv, D = args.batch, 9, 3, 64
    T = 48 if cpu else 336
    dtype = torch.float16 if cpu else torch.bfloat16  # the interpreter mishandles bf16
    variants = [parse_variant(v) for v in args.variants.split(",")]
    if ("base", None) not in variants:
        variants.insert(0, ("base", None))  # the reference for the ratio and the difference
    for name, _ in variants:
        fastattn.splits_of(name)  # a bad name fails before any work
    cols = [int(c) for c in args.cols.split(",")]

    gen = torch.Generator().manual_seed(args.seed)
    pad = torch.randint(0, 5 if cpu else 21, (B,), generator=gen).to(dev)
    q = torch.randn(B, Hq, D, generator=gen).to(dev, dtype)
    kc = torch.randn(args.layers, B, Hkv, T, D, generator=gen).to(dev, dtype)
    vc = torch.randn(args.layers, B, Hkv, T, D, generator=gen).to(dev, dtype)
    col = torch.zeros(1, dtype=torch.long, device=dev)  # read on the device: one graph serves every col
    outs = {v: torch.empty_like(q) for v in variants}

    def calls(v):
        name, stages = v
        for i in range(args.calls):
            fastattn.decode_attention(q, kc[i % args.layers], vc[i % args.layers], pad, col, outs[v], Hkv,
                                      args.block, args.warps, variant=name, stages=stages)

    graphs = {}
    if not cpu:
        col.fill_(cols[0])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile every kernel before capture
            for v in variants:
                calls(v)
        torch.cuda.current_stream().wait_stream(side)
        for v in variants:
            graphs[v] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[v]):
                calls(v)
        torch.cuda.synchronize()

    def timed(v) -> float:
        """Microseconds a call over one run of v's calls."""
        if cpu:
            import time

            t = time.perf_counter()
            calls(v)
            return (time.perf_counter() - t) * 1e6 / args.calls
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graphs[v].replay()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3 / args.calls

    name = torch.cuda.get_device_name() if not cpu else "cpu (triton interpreter)"
    import triton

    print(f"{name}, triton {triton.__version__}: q ({B}, {Hq}, {D}) {str(dtype)[6:]}, cache ({B}, {Hkv}, {T}, {D}) "
          f"x {args.layers} layers, block {args.block} x {args.warps} warps, {args.calls} calls a graph, "
          f"{args.repeats} repeats")
    print(f"{'col':>5} {'variant':<12} {'us a call (mean +- 95%)':>24} {'GB/s':>7} {'base/this':>9} {'max |diff|':>11}")
    for c in cols:
        col.fill_(c)
        live = int((c + 1 - pad).sum()) * Hkv * D * q.element_size() * 2  # K and V bytes of the live spans
        us: dict = {v: [] for v in variants}
        timed(variants[0])  # the first replay after a col change pays for nothing the others do not
        for r in range(args.repeats):
            for v in variants[r % len(variants):] + variants[:r % len(variants)]:  # rotated: no fixed order
                us[v].append(timed(v))
        if not cpu:
            torch.cuda.synchronize()
        base = sum(us[("base", None)]) / args.repeats
        for v in variants:
            mean = sum(us[v]) / args.repeats
            diff = (outs[v].float() - outs[("base", None)].float()).abs().max().item()
            label = v[0] + (f"@{v[1]}" if v[1] else "")
            print(f"{c:>5} {label:<12} {interval(us[v]):>24} {live / mean / 1e3:>7.0f} {base / mean:>9.2f} "
                  f"{diff:>11.2e}")


if __name__ == "__main__":
    main()
