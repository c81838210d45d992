"""`evotui bench --only ddp`: a GRPO step of the real loop on 1 GPU and on N GPUs of this host.

Each GPU keeps the one-GPU batch (`--tasks` x `--group`, 64 x 8 = 512 rollouts
on CUDA), so N GPUs make N times the rollouts of a step; the table gives
rollouts per second on each and the speed-up (the issue's target: 1.8x on 2
GPUs). Both runs are fresh runs of the real loop in this process (rank 0)
with its ranks started by backend/ddp, timed as `step` times them: the
fastest step after the first (warm-up). What does not scale with the GPUs
(rank 0 scores, diagnoses and stores every rollout) shows in the phase rows.

    evotui bench --out /tmp/bench -- --only ddp --gpus 2
    evotui bench --quick -- --only ddp --gpus 2      # CPU: 2 gloo processes, tiny sizes

On the CPU the ranks are gloo processes sharing the cores: it checks that the
section runs, not that it scales.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch


def ddp_rows(b, harness: str) -> list[dict]:
    """Row fields: the step on 1 GPU (baseline) and on N (ours), then its phases."""
    world = b.a.gpus or (torch.cuda.device_count() if b.cuda else 2)
    what = f"GRPO step, 1 vs {world} {'GPUs' if b.cuda else 'CPU processes'}"
    why = _cannot_run(b, world)
    if why:
        return [{"what": what, "note": why}]
    one = _steps(b, harness, 1)
    many = _steps(b, harness, world)
    rps = [r["n_rollouts"] / (r["wall_ms"] / 1000) for r in (one, many)]
    unit = "GPU" if b.cuda else "process"
    rows = [{"what": f"{what}: rollouts/s", "baseline": f"{rps[0]:.1f}", "ours": f"{rps[1]:.1f}",
             "ratio": f"{rps[1] / rps[0]:.2f}x", "note": f"{one['n_rollouts']} rollouts on 1 {unit} vs "
             f"{many['n_rollouts']} on {world} ({b.a.tasks} x {b.a.group} per {unit}); target 1.8x on 2 GPUs",
             "data": {"one": one, "many": many, "world": world}}]
    rows[0]["note"] += f"; {many['engine']} engine"
    for key, name in (("wall_ms", "step"), ("gen_ms", "  generate"), ("train_ms", "  train"),
                      ("score_ms", "  score (rank 0)"), ("store_ms", "  store (rank 0)")):
        rows.append({"what": name, "baseline": f"{one[key] / 1000:.2f} s", "ours": f"{many[key] / 1000:.2f} s",
                     "ratio": f"{many[key] / max(one[key], 1e-9):.2f}x time",
                     "note": f"{many['trained']} vs {one['trained']} sequences trained" if key == "train_ms" else ""})
    return rows


def _cannot_run(b, world: int) -> str | None:
    """Why the section cannot run here, in one line, or None."""
    if b.cuda and torch.cuda.device_count() < max(world, 2):
        return f"needs {max(world, 2)} CUDA GPUs; {torch.cuda.device_count()} visible here"
    if world < 2:
        return f"needs --gpus 2 or more (asked for {world})"
    if b.a.random_init:
        return "skipped with --random-init: the loop loads real weights"
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        return "skipped: the math env needs reasoning-gym"
    return None


def _steps(b, harness: str, world: int) -> dict:
    """`b.a.steps` steps of a fresh run on `world` ranks; the fastest after the first, with its wall time."""
    from backend.config import load_config
    from backend.ddp.launch import ranks
    from backend.loop import Engine
    from backend.policy.load import load_fast_policy
    from backend.progress import StepProgress
    from backend.runs import create_run, harness_code

    cfg = load_config(None, [
        f"train.tasks_per_step={b.a.tasks * world}", f"train.group_size={b.a.group}",
        f"train.max_new_tokens_cap={b.a.step_new}", "evolve.enabled=false",
        f"model.engine={'fast' if b.cuda else 'auto'}",  # one engine per GPU, in both runs
        f"model.device={b.device}", f"model.name={b.a.model}", f"model.gguf_file={b.a.gguf}",
        f"model.threads={b.a.threads}", "train.lr=1e-6", f"train.micro_batch={b.a.micro}",
        f"train.auto_micro_batch={'true' if b.cuda else 'false'}", f"harness={harness}", f"train.gpus={world}"])
    run_dir = Path(tempfile.mkdtemp(prefix="evotui-bench-")) / f"ddp{world}"
    store = create_run(run_dir, cfg, harness_code(cfg))
    rows = []
    try:
        lm = load_fast_policy(cfg.model, seed=cfg.seed)
        with ranks(cfg, adapter=None) as dist:
            eng = Engine(run_dir, cfg, store, quiet=True, lm=lm, dist=dist)
            for s in range(1, b.a.steps + 1):
                b.sync()
                t0 = time.perf_counter()
                row = eng.train_step(s, StepProgress(b.a.steps, quiet=True).start(s))
                b.sync()
                row["wall_ms"] = (time.perf_counter() - t0) * 1000
                row["trained"] = json.loads(row["metrics_json"])["trained_sequences"]
                rows.append(row)
                b.log(f"ddp {world} rank(s), step {s}: {row['wall_ms']:.0f} ms for {row['n_rollouts']} rollouts "
                      f"(generate {row['gen_ms']:.0f}, train {row['train_ms']:.0f}, score {row['score_ms']:.0f})")
            engine_name = eng.engine.name
            del eng
    finally:
        store.close()
    best = dict(min(rows[1:] or rows, key=lambda r: r["wall_ms"]))
    best["engine"] = engine_name
    del lm
    b.free()
    return best
