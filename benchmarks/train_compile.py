"""`train.compile`: the training pass eager, with its decoder layers compiled one by one (today's
`train.compile`), and with the whole transformer body compiled as one graph (what it was before).

Each mode runs in a fresh process on the embedded model's LoRA policy: one forward and backward
of `token_logprobs` over 4 rows of `--lengths[0]` tokens (the first call: the compilation), then
one at each further length (dynamic shapes must serve them without recompiling). Prints seconds
a call, and the log-prob sum of the first call against eager's.

    .venv/bin/python benchmarks/train_compile.py                  # CPU (inductor needs a C++ compiler)
    python3 benchmarks/train_compile.py --device cuda              # on a GPU
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("eager", "layers", "whole")


def one(mode: str, device: str, lengths: list[int]) -> dict:
    """Time the passes of one mode in this process."""
    import torch

    sys.path.insert(0, str(ROOT))
    from backend.config import load_config
    from backend.policy.grpo import token_logprobs
    from backend.policy.lmhead import backbone_and_head
    from backend.policy.model import load_policy

    lm = load_policy(load_config(None, [f"model.device={device}"]).model)
    body = backbone_and_head(lm.model)[0]
    if mode == "layers":
        for layer in body.layers:
            layer.compile(dynamic=True)
    elif mode == "whole":
        body = torch.compile(body, dynamic=True)
    gen = torch.Generator().manual_seed(0)
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    seconds, first_sum = [], None
    for n in lengths:
        ids = torch.randint(3, 1000, (4, n), generator=gen).to(lm.device)
        sync()
        t = time.perf_counter()
        lp, _ = token_logprobs(lm.model, ids, torch.ones_like(ids), 64, False, body, True)
        lp.sum().backward()
        sync()
        seconds.append(time.perf_counter() - t)
        first_sum = float(lp.sum()) if first_sum is None else first_sum
        lm.model.zero_grad(set_to_none=True)
    return {"mode": mode, "seconds": seconds, "logprob_sum": first_sum}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lengths", default="48,40,56", help="tokens a row, one pass each; the first compiles")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child process: run this mode, print JSON
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.one:
        print(json.dumps(one(args.one, args.device, lengths)))
        return
    results = []
    for mode in args.modes.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", mode, "--device", args.device,
                              "--lengths", args.lengths], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            results.append({"mode": mode, "error": (out.stderr.strip().splitlines() or ["?"])[-1]})
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    eager = next((r for r in results if r["mode"] == "eager" and "error" not in r), None)
    print(f"device {args.device}; 4 rows a pass, lengths {args.lengths}; forward + backward of token_logprobs")
    print(f"{'mode':<8} {'first call s':>13} " + " ".join(f"{'len ' + str(n) + ' s':>10}" for n in lengths[1:])
          + f" {'logprob sum':>14} {'vs eager':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['mode']:<8} failed: {r['error'][:100]}")
            continue
        rel = abs(r["logprob_sum"] - eager["logprob_sum"]) / abs(eager["logprob_sum"]) if eager else float("nan")
        print(f"{r['mode']:<8} {r['seconds'][0]:>13.1f} " + " ".join(f"{s:>10.2f}" for s in r["seconds"][1:])
              + f" {r['logprob_sum']:>14.4f} {rel:>9.1e}")


if __name__ == "__main__":
    main()
