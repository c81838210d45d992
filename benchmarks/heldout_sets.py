"""Math held-out sets under the old rule and today's, suite by suite: how many questions each side
asks, how many of them are distinct, the dataset mix, and what the two sides share.

The old rule (kept here only to measure it): validation = the first items of the held-out
seed, test = items of a seed range above it with validation's questions dropped. Today's rule
(`MathEnv._frozen`): one stream, a hash of each question picks its side, each question once,
an even mix.

    .venv/bin/python benchmarks/heldout_sets.py [--n-val 1000] [--n-test 500]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUITES = {
    "S1": ["lcm", "fraction_simplification"],
    "S2": ["decimal_arithmetic", "leg_counting"],
    "default": ["basic_arithmetic", "chain_sum"],
    "suite2": ["gcd", "decimal_chain_sum"],
}
OLD_TEST_SEED_OFFSET = 10_000_019


def old_rule(env, n_val: int, n_test: int) -> tuple[list, list]:
    def frozen(seed: int, n: int, avoid: set[str]) -> list:
        per = -(-n // len(env.datasets))
        out = []
        for d in env.datasets:
            got, size = [], per
            while len(got) < per:
                got = [t for t in env._make(d, env.heldout_level, seed, size) if t.question not in avoid][:per]
                if size >= 4 * per + 16:
                    break
                size += per - len(got) + 4
            out += got
        return out[:n]

    val = frozen(env.heldout_seed, n_val, set())
    test = frozen(env.heldout_seed + OLD_TEST_SEED_OFFSET, n_test, {t.question for t in val})
    return val, test


def describe(tasks: list) -> str:
    mix = Counter(t.meta["dataset"] for t in tasks)
    return (f"{len(tasks):>5} {len({t.question for t in tasks}):>8}  "
            + " / ".join(f"{mix[d]}" for d in sorted(mix)))


def main(argv=None) -> None:
    from backend.envs.math import MathEnv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-val", type=int, default=1000)
    ap.add_argument("--n-test", type=int, default=500)
    a = ap.parse_args(argv)
    print(f"validation asked {a.n_val}, test asked {a.n_test}; columns: tasks, distinct questions, mix by dataset")
    print(f"{'suite':<8} {'rule':<6} {'validation':<28} {'test':<28} shared")
    for name, datasets in SUITES.items():
        env = MathEnv(datasets, 99991, 32)
        for rule, (val, test) in (("old", old_rule(env, a.n_val, a.n_test)),
                                  ("today", (env.validation_tasks(a.n_val), env.test_tasks(a.n_test)))):
            shared = len({t.question for t in val} & {t.question for t in test})
            print(f"{name:<8} {rule:<6} {describe(val):<28} {describe(test):<28} {shared}")


if __name__ == "__main__":
    main()
