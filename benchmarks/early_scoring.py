"""The wait for a math step's scores once its batch has decoded: rows that stopped early judged
and sent to the harness worker while the rest decode (today) against judged early and scored by
the harness after the batch (before), in one run.

The decode is simulated on the host as the fast engine runs it: `--checks` reads of which rows
stopped, `--decode-ms` apart in all (the loop's thread waits on the card in between, the
interpreter's lock released), the rows that stopped handed to `rollout.JudgedEarly` at each read,
the rows cut off at the token limit only at the end. Rows stop at reads drawn from the batch's
seed, the same for both ways. What is timed is `score_all` after the last read: the scoring left
on the step's critical path. Each repeat draws a new batch (`benchmarks/score_overlap.py`'s) with
`clean`'s cache emptied, both ways alternating which goes first; prints ms (mean +- 95%
interval) and whether both gave the same rewards, labels, advantages and verdicts.

    .venv/bin/python benchmarks/early_scoring.py --tasks 64 --group 8 --repeats 6
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def decode(items, checks: int, decode_ms: float, on_finished, seed: int):
    """The generations of `items` as a decode returns them, handing rows that stopped to
    `on_finished` at `checks` evenly spaced reads (rows cut off at the limit: never)."""
    from backend.types import Generation

    rng = random.Random(seed)
    gens = [Generation(ids=s.completion_ids, text=s.completion, finish=s.finish) for s in items]
    at = [rng.randrange(checks - 1) if g.finish == "stop" else checks for g in gens]
    for k in range(checks):
        time.sleep(decode_ms / checks / 1000)  # the card decodes; the loop's thread waits for it
        rows = [r for r, c in enumerate(at) if c == k]
        if rows:
            on_finished(rows, [gens[r] for r in rows])
    return gens


def main(argv=None) -> None:
    from backend.envs.math import MathEnv
    from backend.envs.math_answer import forget_cleaned
    from backend.harness.loader import load_default
    from backend.rollout import JudgedEarly, asking, score_all
    from benchmarks.code_step import interval
    from benchmarks.score_overlap import batch, batch_arguments

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    batch_arguments(ap, repeats=6)
    ap.add_argument("--checks", type=int, default=8, help="reads of stopped rows in a decode (128 tokens / 16)")
    ap.add_argument("--decode-ms", type=float, default=400.0, help="the decode's length")
    args = ap.parse_args(argv)
    harness = load_default("math")
    env = MathEnv(["chain_sum"])
    mnt = 256
    score_all(batch(args.tasks, args.group, seed=-1), harness, env, mnt)  # warm-up: the worker starts
    ms: dict[str, list[float]] = {"before": [], "today": []}
    results: dict[str, list] = {"before": [], "today": []}
    for i in range(args.repeats):
        items = batch(args.tasks, args.group, seed=i)
        prompts = [(s.group, s.idx, s.task, s.prompt_text, s.prompt_ids) for s in items]
        for name in (("before", "today") if i % 2 == 0 else ("today", "before")):
            forget_cleaned()
            with ThreadPoolExecutor(1, thread_name_prefix="harness-early") as pool:
                early = JudgedEarly(prompts, env, asking(harness, mnt, pool) if name == "today" else None)
                run = early.items(decode(copy.deepcopy(items), args.checks, args.decode_ms, early, seed=i))
                t = time.perf_counter()
                score_all(run, harness, env, mnt)
                ms[name].append((time.perf_counter() - t) * 1000)
            results[name] += [(s.reward, s.labels, s.kept, s.advantage, s.verdict.correct) for s in run]
    n = args.tasks * args.group
    stopped = sum(s.finish == "stop" for s in batch(args.tasks, args.group, seed=0))
    print(f"{args.tasks} x {args.group} = {n} rollouts ({stopped} stop before the limit in the first batch), "
          f"a decode of {args.decode_ms:g} ms with {args.checks} reads, {args.repeats} repeats a way")
    print(f"{'way':<8} {'scoring after the decode, ms (mean +- 95%)':>44} {'best':>8}")
    for name, xs in ms.items():
        print(f"{name:<8} {interval(xs):>44} {min(xs):>8.1f}")
    b, t = (sum(ms[k]) / len(ms[k]) for k in ("before", "today"))
    print(f"today waits {b / t:.2f}x less than before; same results: {results['before'] == results['today']}")


if __name__ == "__main__":
    main()
