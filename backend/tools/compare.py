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


def _extra_tasks(base: RunConfig, out: Path, seed: int) -> int:
    probes = probe_rollouts(out / f"coevolve-s{seed}")
    per_step = base.train.group_size * max(base.steps, 1)
    return math.ceil(probes / per_step) if probes else 0


def _finished(run_dir: Path) -> bool:
    from backend.store import Store

    if not (run_dir / "run.db").exists():
        return False
    s = Store.open(run_dir, readonly=True)
    try:
        return s.run()["status"] == "finished"
    finally:
        s.close()


def _row(arm: str, seed: int, run_dir: Path, extra: int) -> dict:
    from backend import runs
    from backend.store import Store

    s = Store.open(run_dir, create=False)
    try:
        sm = runs.summary(s)
    finally:
        s.close()
    return {"arm": arm, "seed": seed, "run_dir": str(run_dir), "heldout_acc": sm["heldout_acc"],
            "heldout_acc_start": sm["heldout_acc_start"], "promoted": sm["promoted"], "status": sm["status"],
            "extra_tasks_per_step": extra}


def run_parallel(base: RunConfig, seeds: list[int], out: Path, jobs: int, quiet: bool = False) -> list[dict]:
    """Like `run_compare`, with arms as parallel `evotui run --headless` processes on one
    machine (where GPU memory allows): static and coevolve first; each seed's control
    starts when that seed's co-evolution arm ends, as its budget depends on its probes."""
    import subprocess
    import sys
    import time

    from backend.config import to_toml

    out.mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    base_d = to_dict(base)

    def launch(arm: str, seed: int, extra: int):
        run_dir = out / f"{arm}-s{seed}"
        if (run_dir / "run.db").exists():
            args = ["--resume", str(run_dir)]
        else:
            cfgf = out / "configs" / f"{arm}-s{seed}.toml"
            cfgf.write_text(to_toml(arm_config(base_d, arm, seed, extra)))
            args = ["--config", str(cfgf), "--run-dir", str(run_dir),
                    "--auto-promote" if arm == "coevolve" else "--supervised"]
        with open(out / f"{arm}-s{seed}.log", "a") as log:  # the child keeps its own copy
            return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                                    stdout=log, stderr=subprocess.STDOUT)

    def ended(arm: str, seed: int, how: str) -> None:
        if not quiet:
            print(f"{arm:<9} seed {seed}: {how}", flush=True)
        if arm == "coevolve":
            extras[seed] = _extra_tasks(base, out, seed)
            pending.append(("control", seed))

    # static and coevolve start at once; each control starts as soon as its seed's
    # co-evolution arm has finished, since its budget is that arm's probe count
    pending = [(arm, seed) for seed in seeds for arm in ("static", "coevolve")]
    running, extras = [], {}
    while pending or running:
        while pending and len(running) < jobs:
            arm, seed = pending.pop(0)
            if _finished(out / f"{arm}-s{seed}"):  # compare run again over the same --out: kept as is
                ended(arm, seed, "finished before")
            else:
                running.append((launch(arm, seed, extras.get(seed, 0) if arm == "control" else 0), arm, seed))
        for item in list(running):
            proc, arm, seed = item
            if proc.poll() is not None:
                running.remove(item)
                ended(arm, seed, f"exit {proc.returncode}")
        time.sleep(0.5)
    extras = {seed: extras.get(seed, 0) for seed in seeds}
    rows = [_row(arm, seed, out / f"{arm}-s{seed}", extras[seed] if arm == "control" else 0)
            for seed in seeds for arm in ARMS]
    (out / "compare.json").write_text(json.dumps(rows, indent=2))
    return rows


def run_compare(base: RunConfig, seeds: list[int], out: Path, quiet: bool = False) -> list[dict]:
    """Run every arm for every seed, one after another; returns one row per run."""
    from backend import runs

    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
    rows = []
    for seed in seeds:
        for arm in ("static", "coevolve", "control"):
            extra = _extra_tasks(base, out, seed) if arm == "control" else 0
            cfg = arm_config(base_d, arm, seed, extra)
            run_dir = out / f"{arm}-s{seed}"
            if _finished(run_dir):  # compare run again over the same --out: only unfinished arms go on
                pass
            elif (run_dir / "run.db").exists():
                runs.resume(run_dir, quiet=quiet)
            else:
                runs.start(cfg, run_dir, quiet=quiet)
            rows.append(r := _row(arm, seed, run_dir, extra))
            if not quiet:
                print(f"{arm:<9} seed {seed}: held-out {r['heldout_acc']:.3f} (start {r['heldout_acc_start']:.3f})",
                      flush=True)
    (out / "compare.json").write_text(json.dumps(rows, indent=2))
    return rows
