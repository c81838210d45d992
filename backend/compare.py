"""`evotui compare`: does co-evolution beat a static harness under the same budget?

Three arms from one config and one seed set, run one after another:

- static:   the default harness, evolution off (the human-engineered recipe)
- coevolve: offline proposer, auto-promote
- control:  static harness, but it spends the co-evolution arm's extra
            rollouts (backtest probes) on ordinary training, so a win cannot
            come from extra compute

Every arm is a normal run directory (openable in the TUI) under OUT/ARM-sSEED.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from backend.config import RunConfig, apply_overrides, config_from_dict, to_dict

ARMS = ("static", "coevolve", "control")


def arm_config(base: dict, arm: str, seed: int, extra_tasks: int = 0) -> RunConfig:
    data = json.loads(json.dumps(base))
    sets = [f"seed={seed}", f"name={arm}"]
    if arm == "static":
        sets.append("evolve.enabled=false")
    elif arm == "coevolve":
        sets += ["evolve.enabled=true", "evolve.auto_promote=true", "evolve.proposer='offline'",
                 "evolve.plant_trap=true"]
    elif arm == "control":
        sets.append("evolve.enabled=false")
        tps = data.get("train", {}).get("tasks_per_step", RunConfig().train.tasks_per_step)
        sets.append(f"train.tasks_per_step={tps + extra_tasks}")
    return config_from_dict(apply_overrides(data, sets))


def probe_rollouts(run_dir: Path) -> int:
    """Rollouts the evolution stage generated outside training (probes)."""
    from backend.store import Store

    s = Store.open(run_dir, readonly=True)
    try:
        n = s.scalar("SELECT coalesce(sum(n_rollouts), 0) FROM backtests WHERE mode = 'probe'") or 0
    finally:
        s.close()
    return int(n)


def run_compare(base: RunConfig, seeds: list[int], out: Path, quiet: bool = False) -> list[dict]:
    """Run every arm for every seed; returns one row per run."""
    from backend import worker

    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
    rows = []
    for seed in seeds:
        for arm in ("static", "coevolve", "control"):
            extra = 0
            if arm == "control":
                probes = probe_rollouts(out / f"coevolve-s{seed}")
                per_step = base.train.group_size * max(base.steps, 1)
                extra = math.ceil(probes / per_step) if probes else 0
            cfg = arm_config(base_d, arm, seed, extra)
            run_dir = out / f"{arm}-s{seed}"
            if (run_dir / "run.db").exists():
                _, s = worker.resume(run_dir, quiet=quiet)
            else:
                _, s = worker.start(cfg, run_dir, quiet=quiet)
            rows.append({"arm": arm, "seed": seed, "run_dir": str(run_dir), "heldout_acc": s["heldout_acc"],
                         "heldout_acc_start": s["heldout_acc_start"], "promoted": s["promoted"],
                         "extra_tasks_per_step": extra})
            if not quiet:
                print(f"{arm:<9} seed {seed}: held-out {s['heldout_acc']:.3f} (start {s['heldout_acc_start']:.3f})",
                      flush=True)
    (out / "compare.json").write_text(json.dumps(rows, indent=2))
    return rows
