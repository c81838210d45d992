"""Bench section `harness`: what the process boundary costs a training step.

Scores one step's rollouts with the default math harness two ways, in the same
run: in-process (the harness code loaded into this process, as before the
boundary existed; a baseline only) and through the sandboxed harness worker
(what training, replay and probes do). Rollouts look like a policy's: a short
derivation and a tagged or bare answer.
"""

from __future__ import annotations

import random
import time


def rollouts(n: int, group: int, seed: int = 0) -> list:
    from backend.types import Rollout

    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        ans = a + b + rng.choice([0, 0, 1, -3])
        text = rng.choice([f"{a} + {b} = {ans}. <answer>{ans}</answer>", f"We add {a} and {b}: the answer is {ans}",
                           f"Let me think. {a} plus {b}... " * rng.randint(1, 8) + f"<answer>{ans}</answer>"])
        out.append(Rollout(
            group=(i // group,), question=f"What is {a} + {b}?", answer=str(a + b), prompt="", completion=text,
            finish="stop", completion_tokens=len(text) // 4, max_new_tokens=256, obs={}, turns=[],
            domain="math", meta={"dataset": "chain_sum"}, task_id=f"b:{i // group}"))
    return out


def in_process(code: str, batch: list, spec) -> float:
    """Seconds to score `batch` with the harness loaded into this process (the old way)."""
    from backend.harness import namespace as hns
    from backend.harness.semantics import RolloutOut, filter_and_advantage, weighted_total

    t = time.perf_counter()
    h = hns.load(code)
    outs = []
    for r in batch:
        view = hns.RolloutView(**r.view())
        comps, errors = hns.score(h, spec.weights, view)
        reward, _ = weighted_total(comps, spec.weights)
        outs.append(RolloutOut(reward, comps, errors, [tuple(x) for x in hns.diagnose(h, view)]))
    filter_and_advantage([r.group for r in batch], outs, ["stop"] * len(batch), spec)
    return time.perf_counter() - t


def through_worker(harness, batch: list) -> float:
    from backend.harness.semantics import apply_harness

    t = time.perf_counter()
    apply_harness(harness, batch)
    return time.perf_counter() - t


def boundary_rows(sizes: list[tuple[str, int, int]], step_s: float | None, reps: int) -> list[dict]:
    """One bench row (its fields) per size: in-process vs worker, median of `reps` after a warm-up."""
    from backend.harness.loader import load_default

    h = load_default("math")
    out = []
    for name, n, group in sizes:
        batch = rollouts(n, group)
        through_worker(h, batch)  # warm-up: starts the worker, imports math-verify there
        in_process(h.code, batch, h.spec)
        base = sorted(in_process(h.code, batch, h.spec) for _ in range(max(3, reps)))
        ours = sorted(through_worker(h, batch) for _ in range(max(3, reps)))
        mb, mo = base[len(base) // 2], ours[len(ours) // 2]
        share = f"; worker is {100 * mo / step_s:.1f}% of a {step_s:.2f} s step" if step_s else ""
        out.append({"what": f"score {n} rollouts ({name})", "baseline": f"{mb * 1000:.0f} ms in-process",
                    "ours": f"{mo * 1000:.0f} ms worker", "ratio": f"{mo / mb:.2f}x",
                    "note": f"overhead {1000 * (mo - mb):+.0f} ms{share}",
                    "data": {"n": n, "base_s": mb, "worker_s": mo}})
    return out
