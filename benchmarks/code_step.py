"""A code GRPO step of the real loop, split into generation, tests, harness and training.

Runs --steps steps of `domain=code` (generated tasks, level --level) in a fresh
run directory with the chosen profile and harness, evolution off, and prints
one row per step: the whole step, generation, the hidden tests in the sandbox
(CodeEnv.evaluate_many, timed here), the harness (scoring and diagnosis), the
training update, and the rest (storing rows, filters). The first step warms up
(compilation, CUDA graphs, the sandbox's first runs); the summary line takes
the fastest later step. This is the measurement behind the issue's target "a
code step at 64 x 8"; timings are printed, never asserted.

    # one H100 (the device's repository root):
    .venv/bin/python benchmarks/code_step.py --profile gpu --tasks 64 --group 8 --steps 3
    .venv/bin/python benchmarks/code_step.py --profile gpu --harness expert --steps 3
    # a CPU smoke test (minutes):
    .venv/bin/python benchmarks/code_step.py --profile cpu --tasks 2 --group 2 --steps 1 \
        --set train.max_new_tokens_cap=16
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class TimedTests:
    """Wraps an env's evaluate_many to add up the time its sandbox runs take."""

    def __init__(self, env):
        self.inner, self.ms, self.n = env.evaluate_many, 0.0, 0

    def __call__(self, pairs):
        t0 = time.perf_counter()
        try:
            return self.inner(pairs)
        finally:
            self.ms += (time.perf_counter() - t0) * 1000
            self.n += len(pairs)

    def take(self) -> tuple[float, int]:
        ms, n, self.ms, self.n = self.ms, self.n, 0.0, 0
        return ms, n


def harness_file(args, out: Path) -> str:
    """The harness path for the run: the default, the expert, or a file; with --level, a copy
    whose CURRICULUM trains at that level."""
    from backend.harness.loader import default_harness_path

    path = {"default": default_harness_path("code"), "expert": default_harness_path("code_expert")}.get(
        args.harness, Path(args.harness))
    if args.level is None:
        return str(path)
    code = Path(path).read_text()
    copy = out / "harness.py"
    copy.write_text(code.replace('CURRICULUM = {"level": 0}', f'CURRICULUM = {{"level": {args.level}}}'))
    return str(copy)


def engine(args):
    from backend.config import load_config
    from backend.loop import Engine
    from backend.policy.model import load_policy
    from backend.runs import create_run, harness_code

    out = Path(args.out or tempfile.mkdtemp(prefix="evotui-code-step-"))
    out.mkdir(parents=True, exist_ok=True)
    sets = [f"profile={args.profile}", "domain=code", f"train.tasks_per_step={args.tasks}",
            f"train.group_size={args.group}", "evolve.enabled=false", f"harness={harness_file(args, out)}"] + args.set
    cfg = load_config(None, sets)
    store = create_run(out / "run", cfg, harness_code(cfg))
    return cfg, Engine(out / "run", cfg, store, quiet=True, lm=load_policy(cfg.model))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="gpu", choices=("cpu", "gpu"))
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3, help="the first one warms up")
    ap.add_argument("--harness", default="default", help="default, expert, or a harness file")
    ap.add_argument("--level", type=int, default=None, help="training level (default: the harness's curriculum)")
    ap.add_argument("--set", action="append", default=[], help="more config overrides, key=value")
    ap.add_argument("--out", default="", help="folder for the run (default: a temporary one)")
    args = ap.parse_args(argv)

    from backend.progress import StepProgress

    cfg, eng = engine(args)
    tests = TimedTests(eng.env)
    eng.env.evaluate_many = tests
    print(f"code step: {args.tasks} tasks x {args.group}, profile {args.profile}, engine {eng.generator.name}, "
          f"{os.cpu_count()} CPU cores for the sandbox, harness {args.harness}")
    print("| step | total s | generate s | tests s (rollouts) | harness s | train s | other s | passed | dead groups |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for s in range(1, args.steps + 1):
        row = eng.train_step(s, StepProgress(args.steps, quiet=True).start(s))
        row["total_ms"] += row["store_ms"]
        t_ms, n = tests.take()
        harness_ms = max(row["score_ms"] - t_ms, 0) + row["diagnose_ms"]
        other = row["total_ms"] - row["gen_ms"] - t_ms - harness_ms - row["train_ms"]
        rows.append(dict(row, tests_ms=t_ms, harness_ms=harness_ms, other_ms=other))
        print(f"| {s} | {row['total_ms'] / 1e3:.2f} | {row['gen_ms'] / 1e3:.2f} | {t_ms / 1e3:.2f} ({n}) "
              f"| {harness_ms / 1e3:.2f} | {row['train_ms'] / 1e3:.2f} | {other / 1e3:.2f} "
              f"| {row['verdict_acc']:.3f} | {row['dead_group_frac']:.2f} |", flush=True)
    best = min(rows[1:] or rows, key=lambda r: r["total_ms"])
    print(f"\nfastest step after warm-up: {best['total_ms'] / 1e3:.2f} s (generate {best['gen_ms'] / 1e3:.2f}, "
          f"tests {best['tests_ms'] / 1e3:.2f}, harness {best['harness_ms'] / 1e3:.2f}, "
          f"train {best['train_ms'] / 1e3:.2f}, other {best['other_ms'] / 1e3:.2f})")
    eng.store.close()


if __name__ == "__main__":
    main()
