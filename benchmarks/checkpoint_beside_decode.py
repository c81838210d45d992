"""A decode-shaped loop while a checkpoint is written beside it: the interpreter's switch interval.

With `train.checkpoint_overlap` the checkpoint's thread writes while the next step generates.
A decode loop is host work between waits that release the interpreter's lock (on a GPU, a CUDA
graph's replay and the sync every 16 steps; here a sleep of --gpu-ms). After each wait the
loop's thread asks for the lock back, and the writer, in Python code, keeps it for up to the
switch interval. The loop is timed four ways, in rotating order, in one run:

- alone: nothing written beside it;
- beside, 5 ms, peft: a checkpoint written beside it at Python's default interval, by peft's
  `save_pretrained` and `torch.save` (the writer before both changes below);
- beside, peft: the same at `checkpoint.WRITER_SWITCH_S` (`begin_save` sets it while its thread
  writes);
- beside: today's, the tensors taken to the host before the thread starts and written by
  `checkpoint_tensors.py`.

Each way prints the loop's milliseconds (mean +- 95% over --repeats) and the writer's own time.
The checkpoint is the embedded model's LoRA adapter and AdamW state (`model.*` defaults or
--device cuda).

    .venv/bin/python benchmarks/checkpoint_beside_decode.py --repeats 10
    python3 benchmarks/checkpoint_beside_decode.py --device cuda --repeats 10     # on a GPU
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def decode_loop(steps: int, gpu_ms: float) -> float:
    """Milliseconds of `steps` iterations of a little host work and a wait that releases the lock."""
    t = time.perf_counter()
    for _ in range(steps):
        sum(range(50))  # the host's share of a step: checks, the next replay's call
        time.sleep(gpu_ms / 1000)
    return (time.perf_counter() - t) * 1000


def main(argv=None) -> None:
    import torch

    from backend.policy import checkpoint as ckpt
    from benchmarks.checkpoint_save import peft_files, policy_and_optimizer
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=128, help="decode steps a loop")
    ap.add_argument("--gpu-ms", type=float, default=1.5, help="the wait of one decode step")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.gpu_ms < 0:
        ap.error("--repeats and --steps must be at least 1, --gpu-ms not negative")

    _, lm, opt, _ = policy_and_optimizer(args.device)
    run = Path(tempfile.mkdtemp(prefix="evotui-ckpt-decode-"))
    today = ckpt.WRITER_SWITCH_S
    ways = {"alone": None, "beside, 5 ms, peft": (0.005, True), "beside, peft": (today, True),
            "beside": (today, False)}  # (the writer's switch interval, peft's and torch's writers)
    loop_ms: dict[str, list[float]] = {w: [] for w in ways}
    write_ms: dict[str, list[float]] = {w: [] for w in ways}
    k = 0
    try:
        for i in range(args.repeats + 1):  # the first round apart: imports, first writes
            order = list(ways)[i % len(ways):] + list(ways)[:i % len(ways)]
            for way in order:
                k += 1
                writing, ended = None, []
                if ways[way] is not None:
                    ckpt.WRITER_SWITCH_S, peft = ways[way]
                    t0 = time.perf_counter()
                    with peft_files() if peft else nullcontext():
                        writing = ckpt.begin_save(run, k, lm.model, opt)
                    writing.add_done_callback(lambda _f, ended=ended: ended.append(time.perf_counter()))
                ms = decode_loop(args.steps, args.gpu_ms)
                if writing is not None:
                    writing.result()
                    while not ended:  # the callback runs just after the result is set
                        time.sleep(0.0001)
                if i:
                    loop_ms[way].append(ms)
                    if ended:
                        write_ms[way].append((ended[0] - t0) * 1000)
    finally:
        ckpt.WRITER_SWITCH_S = today
        shutil.rmtree(run, ignore_errors=True)
    device = torch.cuda.get_device_name() if lm.device.type == "cuda" else "cpu"
    print(f"device {lm.device} ({device}); a loop of {args.steps} steps of {args.gpu_ms} ms waits; "
          f"{args.repeats} a way after the first; writer's interval {today * 1000:g} ms")
    print(f"{'way':<20} {'loop ms (mean +- 95%)':>24} {'writer ms':>22}")
    for way in ways:
        w = interval(write_ms[way]) if write_ms[way] else "-"
        print(f"{way:<20} {interval(loop_ms[way]):>24} {w:>22}")
    alone = sum(loop_ms["alone"]) / args.repeats
    cost = {w: sum(loop_ms[w]) / args.repeats - alone for w in ways if ways[w] is not None}
    print("the loop's cost of a checkpoint beside it: " + ", ".join(f"{w} +{c:.1f} ms" for w, c in cost.items()))


if __name__ == "__main__":
    main()
