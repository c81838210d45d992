"""A code GRPO step of the real loop, split into generation, tests, harness and training.

Runs --steps steps of `domain=code` (generated tasks, level --level) in a fresh
run directory with the chosen profile and harness, evolution off, and prints
one row per step: the whole step, generation, the hidden tests in the sandbox
(CodeEnv.evaluate_many, timed here), the harness (scoring and diagnosis), the
training update, and the rest (storing rows, filters). The first step warms up
(compilation, CUDA graphs, the sandbox's first runs); the summary line takes
the fastest later step. This is the measurement behind the issue's target "a
code step at 64 x 8"; timings are printed, never asserted.

    # one GPU (the device's repository root):
    .venv/bin/python benchmarks/code_step.py --profile gpu --tasks 64 --group 8 --steps 3
    .venv/bin/python benchmarks/code_step.py --profile gpu --harness expert --steps 3
    # a CPU smoke test (minutes):
    .venv/bin/python benchmarks/code_step.py --profile cpu --tasks 2 --group 2 --steps 1 \
        --set train.max_new_tokens_cap=16
    # the step's tests on warm sandbox workers and, on the same rollouts, fresh processes:
    .venv/bin/python benchmarks/code_step.py --profile gpu --steps 3 --compare-sandbox
    # the tests alone, no model: tasks x group reference or wrong completions, both ways
    .venv/bin/python benchmarks/code_step.py --tests-only --tasks 64 --group 8 --repeats 5
    # the same batch with K runaway completions (an endless loop), at two `code.timeout_s`
    .venv/bin/python benchmarks/code_step.py --tests-only --runaway 1 --timeouts 5,1 --repeats 3

--compare-sandbox evaluates each step's rollouts a second time on the other path
(outside the step's timing) and prints both tests columns, their ratio and how
many verdicts differ; the step runs on the path `code.sandbox_pool` picks.
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
    """Wraps an env's evaluate_many to add up the time its sandbox runs take; with `compare`,
    evaluates the same pairs again on the other sandbox path, timed apart, and counts differences."""

    def __init__(self, env, compare: bool = False):
        self.env, self.inner, self.compare = env, env.evaluate_many, compare
        self.ms, self.n, self.other_ms, self.differ = 0.0, 0, 0.0, 0

    def __call__(self, pairs):
        t0 = time.perf_counter()
        try:
            out = self.inner(pairs)
        finally:
            self.ms += (time.perf_counter() - t0) * 1000
            self.n += len(pairs)
        if self.compare:
            cfg = self.env.cfg
            cfg.sandbox_pool = not cfg.sandbox_pool
            t0 = time.perf_counter()
            try:
                other = self.inner(pairs)
            finally:
                self.other_ms += (time.perf_counter() - t0) * 1000
                cfg.sandbox_pool = not cfg.sandbox_pool
            self.differ += sum((a.correct, a.status) != (b.correct, b.status) for a, b in zip(out, other))
        return out

    def take(self) -> tuple[float, int, float, int]:
        got = self.ms, self.n, self.other_ms, self.differ
        self.ms, self.n, self.other_ms, self.differ = 0.0, 0, 0.0, 0
        return got


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


def interval(xs: list[float]) -> str:
    """Mean and a 95% t-interval half-width (n < 2: the value alone)."""
    import statistics

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return f"{m:.2f}"
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}.get(len(xs), 2.0)
    return f"{m:.2f} +- {t * statistics.stdev(xs) / len(xs) ** 0.5:.2f}"


def pool_note(env) -> str:
    """What the env's sandbox pool did: its workers, replacements, or why it never started."""
    pool = getattr(env, "_pool", None)
    if pool is None:
        return "sandbox pool: not used"
    if pool.start_error:
        return f"sandbox pool: its workers did not start, so every run was fresh: {pool.start_error}"
    return f"sandbox pool: {pool.size} workers, {pool.restarts} replaced"


def tests_only(args) -> None:
    """Evaluate tasks x group completions (the first half of each group the task's reference
    solution, the rest a wrong one) on fresh processes and on the warm pool, alternating,
    --repeats times; no model. Prints seconds per batch (mean +- 95% interval) and the ratio."""
    import random

    from backend.config import CodeConfig
    from backend.envs import codegen
    from backend.envs.code import CodeEnv, to_task

    env = CodeEnv(CodeConfig(sandbox_pool=True))
    probs = codegen.sample(random.Random(0), args.level or 0, args.tasks)
    pairs = [(to_task(p), f"```python\n{p.solution if g < args.group // 2 else p.prompt + '    return None'}\n```")
             for p in probs for g in range(args.group)]
    for i in range(min(args.runaway, len(pairs))):  # the last rollouts of the batch never return
        task = pairs[-1 - i][0]
        pairs[-1 - i] = (task, f"```python\n{probs[-1].prompt}    while True:\n        pass\n```")
    env.evaluate_many(pairs[: min(len(pairs), 2 * os.cpu_count())])  # start the workers: not timed
    if args.timeouts:
        return compare_timeouts(env, pairs, args)
    times, verdicts = alternate(env, pairs, "sandbox_pool", [False, True], args.repeats)
    note = pool_note(env)
    env.close()
    differ = sum(a != b for a, b in zip(verdicts[True], verdicts[False]))
    ratio = [f / p for f, p in zip(times[False], times[True])]
    load = os.getloadavg()[0]
    print(f"code tests only: {len(pairs)} completions ({args.tasks} tasks x {args.group}), {args.repeats} repeats, "
          f"{os.cpu_count()} CPU cores, load {load:.1f}, passed {sum(c for c, _ in verdicts[True])}")
    print("| path | tests s per batch (mean +- 95%) |\n|---|---|")
    print(f"| fresh process per run | {interval(times[False])} |\n| warm pool | {interval(times[True])} |")
    print(f"speed-up (fresh / pool, paired per repeat): {interval(ratio)}; verdicts that differ: {differ}")
    print(note)


def alternate(env, pairs, setting: str, values: list, repeats: int) -> tuple[dict, dict]:
    """The batch evaluated with `env.cfg.<setting>` at each of `values` in turn, `repeats` rounds:
    ({value: seconds per batch}, {value: the last batch's (correct, status) per completion})."""
    times: dict = {v: [] for v in values}
    verdicts: dict = {}
    for _ in range(repeats):
        for v in values:
            setattr(env.cfg, setting, v)
            t0 = time.perf_counter()
            verdicts[v] = [(x.correct, x.status) for x in env.evaluate_many(pairs)]
            times[v].append(time.perf_counter() - t0)
    return times, verdicts


def compare_timeouts(env, pairs, args) -> None:
    """The same batch on the warm pool under each `code.timeout_s` of --timeouts, alternating,
    --repeats times: what the step's tests wait for when a rollout never returns."""
    limits = [float(t) for t in args.timeouts.split(",")]
    times, verdicts = alternate(env, pairs, "timeout_s", limits, args.repeats)
    note = pool_note(env)
    env.close()
    base = limits[0]
    print(f"code tests only: {len(pairs)} completions, {args.runaway} of them endless loops, {args.repeats} repeats, "
          f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}, warm pool")
    print("| code.timeout_s | tests s per batch (mean +- 95%) | passed | timed out | verdicts unlike the first |")
    print("|---|---|---|---|---|")
    for t in limits:
        v = verdicts[t]
        print(f"| {t:g} | {interval(times[t])} | {sum(c for c, _ in v)} | {sum(st == 'timeout' for _, st in v)} | "
              f"{sum(a != b for a, b in zip(v, verdicts[base]))} |")
    print(note)


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
    ap.add_argument("--compare-sandbox", action="store_true",
                    help="also run each step's tests on the other sandbox path and print both")
    ap.add_argument("--tests-only", action="store_true", help="no model: time the tests of stored completions")
    ap.add_argument("--repeats", type=int, default=3, help="--tests-only: batches per path")
    ap.add_argument("--runaway", type=int, default=0, help="--tests-only: completions that loop forever")
    ap.add_argument("--timeouts", default="", help="--tests-only: code.timeout_s values to compare (e.g. 5,1)")
    args = ap.parse_args(argv)
    if args.tests_only:
        return tests_only(args)

    from backend.progress import StepProgress

    cfg, eng = engine(args)
    tests = TimedTests(eng.env, compare=args.compare_sandbox)
    eng.env.evaluate_many = tests
    path = "warm pool" if cfg.code.sandbox_pool else "fresh process per run"
    print(f"code step: {args.tasks} tasks x {args.group}, profile {args.profile}, engine {eng.generator.name}, "
          f"{os.cpu_count()} CPU cores for the sandbox (load {os.getloadavg()[0]:.1f}), tests on: {path}, "
          f"harness {args.harness}")
    other = " | tests s, other path | speed-up (fresh / pool) | verdicts differ" if args.compare_sandbox else ""
    print(f"| step | total s | generate s | tests s (rollouts) | harness s | train s | other s | passed "
          f"| dead groups{other} |")
    print("|---" * (9 + 3 * args.compare_sandbox) + "|")
    rows = []
    for s in range(1, args.steps + 1):
        row = eng.train_step(s, StepProgress(args.steps, quiet=True).start(s))
        row["total_ms"] += row["store_ms"]
        t_ms, n, o_ms, differ = tests.take()
        harness_ms = max(row["score_ms"] - t_ms, 0) + row["diagnose_ms"]
        rest = row["total_ms"] - row["gen_ms"] - t_ms - harness_ms - row["train_ms"]
        rows.append(dict(row, tests_ms=t_ms, harness_ms=harness_ms, other_ms=rest, other_path_ms=o_ms))
        fresh_ms, pool_ms = (o_ms, t_ms) if cfg.code.sandbox_pool else (t_ms, o_ms)
        speed = f"{fresh_ms / pool_ms:.2f}x" if min(fresh_ms, pool_ms) >= 1 else "-"
        cmp = f" | {o_ms / 1e3:.2f} | {speed} | {differ}" if args.compare_sandbox else ""
        print(f"| {s} | {row['total_ms'] / 1e3:.2f} | {row['gen_ms'] / 1e3:.2f} | {t_ms / 1e3:.2f} ({n}) "
              f"| {harness_ms / 1e3:.2f} | {row['train_ms'] / 1e3:.2f} | {rest / 1e3:.2f} "
              f"| {row['verdict_acc']:.3f} | {row['dead_group_frac']:.2f}{cmp} |", flush=True)
    best = min(rows[1:] or rows, key=lambda r: r["total_ms"])
    print(f"\nfastest step after warm-up: {best['total_ms'] / 1e3:.2f} s (generate {best['gen_ms'] / 1e3:.2f}, "
          f"tests {best['tests_ms'] / 1e3:.2f}, harness {best['harness_ms'] / 1e3:.2f}, "
          f"train {best['train_ms'] / 1e3:.2f}, other {best['other_ms'] / 1e3:.2f})")
    if args.compare_sandbox:
        with_other = best["total_ms"] - best["tests_ms"] + best["other_path_ms"]
        print(f"the same step with its tests on the other path: {with_other / 1e3:.2f} s")
    print(pool_note(eng.env))
    eng.env.close()
    eng.store.close()


if __name__ == "__main__":
    main()
