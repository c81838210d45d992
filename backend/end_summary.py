"""The lines a headless run ends with: what happened, in plain words, and what to do next.

Grep-able (`key: value` at the start of a line), read from the run's store:
whether the policy was updated (and why not, when it was not), both held-out
sets by name with their counts and 95% intervals, what changed in the harness
(a line per promotion and rollback), and the next commands with the run's path.

    run:         20261127-231500-math-s0 (finished, 20 of 20 steps, 741 s)
    policy:      updated at 3 of 20 steps (policy version 2)
    test:        0.094 -> 0.125 (4 of 32, 95% CI 0.050-0.282; reported only)
    ...
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

from backend.store import Store
from backend.outcomes import decision

KEY = "{:<12} {}"


def end_summary(run_dir: Path, wall_s: float | None = None) -> str:
    """The summary of the run at `run_dir` (read-only)."""
    store = Store.open(run_dir, readonly=True)
    try:
        run = store.run()
        lines = ["---", _run_line(run, store.last_step(), wall_s), KEY.format("policy:", policy_line(store))]
        lines += held_out_lines(store) + dead_group_lines(store) + harness_lines(store, run)
        lines += next_commands(Path(run_dir), run["status"], run["steps_total"],
                               trained=store.current_policy_version() is not None)
        return "\n".join(lines)
    finally:
        store.close()


def _run_line(run: dict, last: int, wall_s: float | None) -> str:
    took = f", {wall_s:.0f} s" if wall_s is not None else ""
    return KEY.format("run:", f"{run['name']} ({run['status']}, {last} of {run['steps_total']} steps{took})")


def policy_line(store: Store) -> str:
    """`updated at 3 of 20 steps`, or why no update was taken."""
    metrics = [json.loads(r["metrics_json"] or "{}") for r in store.step_metrics()]
    updated = sum(1 for m in metrics if m.get("trained_sequences"))
    if not metrics:
        return "no step was taken"
    if updated:
        return f"updated at {updated} of {len(metrics)} steps"
    dead = [r["dead_group_frac"] for r in store.step_series()]
    if dead and all(d is not None and d >= 1.0 for d in dead):
        return ("no update was taken: every group was dead (within each group the rewards tied, so "
                "group-relative advantages were all zero)")
    return "no update was taken: the harness kept no rollout with a non-zero advantage"


def held_out_lines(store: Store) -> list[str]:
    """`test:` and `validation:` from the first to the last evaluation, each labelled by what reads it."""
    rows = store.evals_after(0)
    out = []
    for split, role in (("test", "reported only"), ("validation", "read by the gate")):
        evs = [r for r in rows if r["split"] == split]
        if not evs:
            out.append(KEY.format(f"{split}:", "not evaluated"))
            continue
        first, last = evs[0], evs[-1]
        out.append(KEY.format(f"{split}:", f"{first['accuracy']:.3f} at step {first['step']} -> "
                              f"{last['accuracy']:.3f} at step {last['step']} ({count_line(last)}; {role})"))
    return out


def eval_interval(ev: dict) -> tuple[int, int, float, float]:
    """(k, n, low, high) of an evaluation's accuracy (its row's `accuracy` and `n`): the correct
    count and the 95% Wilson interval."""
    from backend.evolve.stats import wilson_interval

    n = int(ev["n"] or 0)
    k = round(ev["accuracy"] * n)
    return (k, n, *wilson_interval(k, n))


def count_line(ev: dict) -> str:
    """'k of n, 95% CI low-high' of an evaluation (`eval_interval`)."""
    k, n, lo, hi = eval_interval(ev)
    return f"{k} of {n}, 95% CI {lo:.3f}-{hi:.3f}"


def dead_group_lines(store: Store) -> list[str]:
    steps = store.step_series()
    if not steps:
        return []
    a, b = steps[0], steps[-1]
    return [KEY.format("dead groups:", f"{a['dead_group_frac']:.2f} at step {a['step']} -> "
                       f"{b['dead_group_frac']:.2f} at step {b['step']} (groups whose rewards all tie)")]


def harness_lines(store: Store, run: dict) -> list[str]:
    """`harness: v1 -> v3; 16 candidates: 2 promoted, ...` and a line per promotion and rollback."""
    ivs = store.interventions()
    counts = Counter(iv.status for iv in ivs)
    mix = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.most_common())
    head = f"v1 -> v{run['harness_version']}" if run["harness_version"] != 1 else "v1, unchanged"
    out = [KEY.format("harness:", f"{head}; {len(ivs)} candidate(s)" + (f": {mix}" if mix else ""))]
    for iv in ivs:
        if iv.status in ("promoted", "rolled_back"):
            what = "promoted" if iv.status == "promoted" else "promoted, then rolled back:"
            out.append(f"  {what} #{iv.id} at step {iv.promoted_step}: {iv.title[:60]} "
                       f"({decision(store.latest_backtest(iv.id), iv)})")
    return out


def next_commands(run_dir: Path, status: str, steps_total: int | None, trained: bool = False) -> list[str]:
    """What to run next, with the run's real path; `trained`: the run has a policy to export."""
    run = shlex.quote(str(run_dir))
    go_on = (f"evotui run --headless --resume {run}" if status != "finished" else
             f"evotui run --headless --resume {run} --steps {2 * (steps_total or 0) or 'N'}")
    return ["next:",
            f"  evotui open {run}      # browse rollouts, diagnoses, interventions in the TUI",
            f"  evotui report {run}    # Markdown report with plots, in {run_dir / 'report'}",
            f"  evotui export {run}    # the rollouts as a dataset (jsonl or parquet)",
            *([f"  evotui export {run} --policy    # the trained policy as a model transformers loads"]
              if trained else []),
            f"  {go_on}    # train on" + (" to the new total" if status == "finished" else "")]
