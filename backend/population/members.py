"""The members of a population: their configs, and one segment of training for all of them.

Member i is a normal run directory `POP/m{i}` trained by `evotui run --headless`
in its own process (`--resume m{i} --steps T` continues it to step T). Its
config is the population's with its own seed (`member_seed`), evolution off
(harness changes come from the population, never from inside a segment), an
evaluation every `population.every` steps (the comparisons) and a checkpoint
at every comparison step (a copy takes the source's policy as it is there).

A segment trains every member to the same step, `jobs` processes at a time,
packed on the visible GPUs the way `evotui compare` packs runs
(`tools.compare.grid_config`, `pick_gpu`). A stop (SIGTERM, Ctrl-C) launches
nothing more and passes SIGTERM to the running members, which stop at their
next step boundary with their state saved (`tools.compare.Stopping`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.config import RunConfig, apply_overrides, config_from_dict, to_toml
from backend.store import Store
from backend.grid import Stopping, grid_config, pick_gpu, visible_gpus

SEED_STRIDE = 1000
"""Member i of a population with seed s trains with seed s * SEED_STRIDE + i: populations of
different seeds never share a member seed (size is at most SEED_STRIDE)."""


def member_seed(seed: int, idx: int) -> int:
    """Member `idx`'s seed.

    >>> member_seed(0, 1), member_seed(2, 0)
    (1, 2000)
    """
    return seed * SEED_STRIDE + idx


def member_config(base: dict[str, Any], idx: int, every: int) -> RunConfig:
    """Member `idx`'s run config from the population's base config (a plain tree)."""
    data = json.loads(json.dumps(base))
    name = data.get("name") or "population"
    ckpt = int(data.get("train", {}).get("checkpoint_every", RunConfig().train.checkpoint_every))
    sets = [f"seed={member_seed(int(data.get('seed', 0)), idx)}", f"name='{name}-m{idx}'",
            "evolve.enabled=false", f"eval.every={every}", "population.size=0",
            f"train.checkpoint_every={math.gcd(ckpt, every)}"]
    return config_from_dict(apply_overrides(data, sets))


@dataclass(frozen=True)
class MemberRun:
    """One member's process in a segment: how it ended."""

    idx: int
    exit_code: int | None
    log: Path


def reached(run_dir: Path, step: int) -> bool:
    """The member trained to `step` and evaluated there (its comparison can read it)."""
    if not (run_dir / "run.db").is_file():
        return False
    s = Store.open(run_dir, readonly=True)
    try:
        last = s.latest_eval("validation")
        return s.last_step() >= step and last is not None and last["step"] == step
    finally:
        s.close()


def launch_args(pop_dir: Path, idx: int, cfg: RunConfig, step: int) -> list[str]:
    """`evotui run --headless` arguments taking member `idx` to `step`: a new run from its config
    the first time, `--resume` after."""
    run_dir = pop_dir / f"m{idx}"
    if (run_dir / "run.db").exists():
        return ["--resume", str(run_dir), "--steps", str(step)]
    cfgf = pop_dir / "configs" / f"m{idx}.toml"
    cfgf.parent.mkdir(parents=True, exist_ok=True)
    cfgf.write_text(to_toml(cfg))
    return ["--config", str(cfgf), "--run-dir", str(run_dir), "--supervised", "--steps", str(step)]


def run_segment(pop_dir: Path, base: RunConfig, configs: list[RunConfig], step: int, jobs: int,
                stopping: Stopping) -> list[MemberRun]:
    """Train every member that has not reached `step` to it, `jobs` at a time; one MemberRun each
    (exit_code None: it had reached it already, or it was never started because of a stop)."""
    gpus = visible_gpus()
    share = grid_config(base, jobs, gpus)["model"]["gpu_share"]
    todo = [i for i in range(len(configs)) if not reached(pop_dir / f"m{i}", step)]
    done: dict[int, int | None] = {i: None for i in range(len(configs)) if i not in todo}
    running: list[tuple[subprocess.Popen[bytes], int, str | None]] = []
    logs = pop_dir / "logs"
    logs.mkdir(exist_ok=True)
    while running or (todo and not stopping.requested):
        while todo and len(running) < jobs and not stopping.requested:
            i = todo.pop(0)
            cfg = config_from_dict(apply_overrides(_tree(configs[i]), [f"model.gpu_share={share}"]))
            gpu = pick_gpu(gpus, [g for *_, g in running if g is not None])
            running.append((_launch(pop_dir, i, cfg, step, gpu, jobs, not gpus, logs), i, gpu))
        if stopping.requested and not stopping.sent:
            stopping.sent = True
            for proc, *_ in running:
                proc.send_signal(signal.SIGTERM)
        for item in list(running):
            if item[0].poll() is not None:
                running.remove(item)
                done[item[1]] = item[0].returncode
        time.sleep(0.2)
    return [MemberRun(i, done.get(i), logs / f"m{i}.log") for i in range(len(configs))]


def _tree(cfg: RunConfig) -> dict[str, Any]:
    from backend.config import to_dict

    return to_dict(cfg)


def _launch(pop_dir: Path, idx: int, cfg: RunConfig, step: int, gpu: str | None, jobs: int, cpu: bool,
            logs: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
    if cpu and jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
        # members side by side on CPU: one thread pool per core in each would oversubscribe them
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    args = launch_args(pop_dir, idx, cfg, step)
    with open(logs / f"m{idx}.log", "a") as log:  # the child keeps its own copy
        return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env)


def last_line(log: Path) -> str:
    """The last non-empty line of a member's log, for a one-line error."""
    try:
        lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(no output)"
