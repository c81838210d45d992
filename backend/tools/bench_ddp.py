"""`evotui bench --only ddp`: a GRPO step of the real loop on 1 GPU and on N GPUs of this host.

Each GPU keeps the one-GPU batch (`--tasks` x `--group`, 64 x 8 = 512 rollouts
on CUDA), so N GPUs make N times the rollouts of a step; the table gives
rollouts per second on each and the speed-up (the issue's target: 1.8x on 2
GPUs). Both runs are fresh runs of the real loop in this process (rank 0)
with its ranks started by backend/ddp, timed as `step` times them: the
fastest step after the first (warm-up). The phase rows put the two runs side
by side, as rank 0 spends the step: its own share's generation, judging and
scoring (each rank judges and scores its own share; rank 0 then applies the
harness to the batch), the wait for the other ranks' shares, the update
(trained rollouts dealt out by token count, gradients all-reduced), the
store (rank 0 alone writes every rollout) and the rest, split by when the loop
entered each of its phases (`REST_PARTS`): sampling tasks, what rank 0 does
around its own share's generation (the tasks' chat messages, the message to
the ranks, the weights' broadcast; every rank builds its own share's prompts
inside "generate", as one process does), the filters' group statistics, the
checkpoint, and the rows around the store. Below them, each rank's update
beside the one process's: the micro-batches it ran (count x rows), the tokens they computed with padding
against the sequences' own, the host's time queueing them and the wait for
the device after, and padded tokens per second (`GRPOTrainer.last_shape`): a
rank slower at the same micro-batches points at the host (cores, clocks) or
the card, one with more or longer micro-batches at the code.

    evotui bench --out /tmp/bench -- --only ddp --gpus 2
    evotui bench --quick -- --only ddp --gpus 2      # CPU: 2 gloo processes, tiny sizes

On the CPU the ranks are gloo processes sharing the cores: it checks that the
section runs, not that it scales.
"""

from __future__ import annotations

import json
import statistics
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
    for key, name in (("wall_ms", "step"), ("train_ms", "train")):  # the fastest step hides a noisy host
        base_ms, ours_ms = one["median"][key], many["median"][key]
        rows.append({"what": f"{name}, median of the steps after the first", "baseline": f"{base_ms / 1000:.2f} s",
                     "ours": f"{ours_ms / 1000:.2f} s",
                     "ratio": f"{ours_ms / base_ms:.2f}x time" if base_ms > 0 else "",
                     "note": f"{one['n_timed']} and {many['n_timed']} steps; the rows below are the fastest step's"})
    notes = {"train_ms": f"{many['trained']} vs {one['trained']} sequences trained",
             "prep_ms": "N ranks only: the tasks' messages sent, the LoRA weights broadcast"}
    for key, name in PHASES + REST_PARTS:
        rows.append({"what": name, "baseline": f"{one[key] / 1000:.2f} s", "ours": f"{many[key] / 1000:.2f} s",
                     "ratio": f"{many[key] / one[key]:.2f}x time" if one[key] > 0 and key != "prep_ms" else "",
                     "note": notes.get(key, "")})
    return rows + _by_rank(many) + _shape_rows(one, many)


PHASES = (("wall_ms", "step"), ("gen_ms", "  generate (rank 0's share)"),
          ("score_ms", "  judge + score (rank 0)"), ("wait_ms", "  wait for the other ranks"),
          ("train_ms", "  train"), ("store_ms", "  store (rank 0)"), ("rest_ms", "  rest (filter, rows, checkpoint)"))
"""The phases of a step as rank 0 spends it; they add up to the step's wall time."""

REST_PARTS = (("tasks_ms", "    rest: sample tasks, check disk room"),
              ("prep_ms", "    rest: messages to the ranks, weights"),
              ("filter_ms", "    rest: filter (group statistics)"),
              ("ckpt_ms", "    rest: checkpoint"),
              ("rows_ms", "    rest: rows, step row, retention"))
"""The rest (`PHASES`' last) by the loop's phase marks (`PhaseClock`); they add up to it but for
the few calls between the update and the checkpoint mark."""


class PhaseClock:
    """A quiet `StepProgress` that notes when `Engine.train_step` enters each of its phases
    (backend/progress.py: generate, filter, train, checkpoint, store)."""

    def __init__(self):
        self.marks: dict[str, float] = {}

    def phase(self, name: str) -> None:
        self.marks[name] = time.perf_counter()


def _rest_parts(row: dict, t0: float, t1: float, marks: dict[str, float]) -> dict:
    """`REST_PARTS` of a step timed from `t0` to `t1` with the loop's phase `marks`."""
    ms = {a: (marks[b] - marks[a]) * 1000 for a, b in (("generate", "filter"), ("filter", "train"),
                                                         ("checkpoint", "store"))}
    return {"tasks_ms": (marks["generate"] - t0) * 1000,
            "prep_ms": ms["generate"] - row["gen_ms"] - row["score_ms"] - row["wait_ms"],
            "filter_ms": ms["filter"], "ckpt_ms": ms["checkpoint"],
            "rows_ms": (t1 - marks["store"]) * 1000 - row["store_ms"]}


def _by_rank(row: dict) -> list[dict]:
    """Each rank's own times in the N-rank step (rank 0 | rank 1 | ...): the slowest sets the step."""
    times = row.get("ranks") or {}
    by_rank = times.get("by_rank") or []
    rows = []
    for key, name in (("gen_ms", "generate"), ("judge_ms", "judge + score its share"),
                      ("backward_ms", "update up to the all-reduce")):
        if by_rank and all(key in r for r in by_rank):
            each = " | ".join(f"{r[key] / 1000:.2f}" for r in by_rank)
            rows.append({"what": f"  by rank: {name}", "ours": f"{each} s",
                         "note": "rank 0 | rank 1 | ...; the others wait for the slowest"})
    if "moved" in times:
        rows.append({"what": "  trained rollouts the balance moved", "ours": str(times["moved"]),
                     "note": f"of {row['trained']}: dealt out by tokens before the update"})
    return rows


def _shape_rows(one: dict, many: dict) -> list[dict]:
    """The micro-batches each rank's update ran beside the one process's (`GRPOTrainer.last_shape`):
    a rank trains about the one-GPU batch, so a different count, size or padding shows here."""
    base = one.get("shape") or {}
    ranks = [r.get("shape") or {} for r in (many.get("ranks") or {}).get("by_rank") or []]
    if not base or not ranks or not all(ranks):
        return []

    def each(fmt) -> str:
        return " | ".join(fmt(r) for r in ranks)

    def passes(sh: dict) -> str:
        return f"{sh['micro_batches']} x {sh['micro_batch']}"

    def padded(sh: dict) -> str:
        return f"{sh['padded_tokens']:,} / {sh['seq_tokens']:,}"

    def per_pass(sh: dict) -> str:
        ms = sh["pass_ms"]
        return f"{sum(ms) / max(len(ms), 1):.0f}"

    def split_ms(sh: dict) -> str:
        return f"{sh['issue_ms']:.0f} + {sh['wait_ms']:.0f}"

    def rate(sh: dict) -> str:
        return f"{sh['padded_tokens'] / max((sh['issue_ms'] + sh['wait_ms']) / 1000, 1e-9):,.0f}"

    note = "1 process, then rank 0 | rank 1 | ..."
    return [
        {"what": "  update: micro-batches x rows", "baseline": passes(base), "ours": each(passes),
         "note": f"{note}; longest sequence {base['max_len']} vs {each(lambda r: str(r['max_len']))} tokens"},
        {"what": "  update: tokens padded / own", "baseline": padded(base), "ours": each(padded),
         "note": f"{note}; rows {base['rows']} vs {each(lambda r: str(r['rows']))}"},
        {"what": "  update: ms per micro-batch", "baseline": per_pass(base), "ours": each(per_pass),
         "note": f"{note}; mean time to queue (CUDA) or run (CPU) a forward + backward"},
        {"what": "  update: queueing, then waiting (ms)", "baseline": split_ms(base), "ours": each(split_ms),
         "note": f"{note}; the host's time collating and queueing, then the wait for the device at the end"},
        {"what": "  update: padded tokens per second", "baseline": rate(base), "ours": each(rate),
         "note": f"{note}; lower on a rank with the same micro-batches: the host, not the code"},
    ]


def _phases(row: dict) -> dict:
    """A step row's phases (`PHASES`): the wait from its metrics (0 on one process), the rest by difference."""
    out = dict(row, wait_ms=float(json.loads(row["metrics_json"]).get("wait_ms", 0.0)))
    out["rest_ms"] = row["wall_ms"] - sum(out[k] for k, _ in PHASES[1:-1])
    return out


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
    from backend.runs import create_run, harness_code

    cfg = load_config(None, [
        f"train.tasks_per_step={b.a.tasks * world}", f"train.group_size={b.a.group}",
        f"train.max_new_tokens_cap={b.a.step_new}", "evolve.enabled=false",
        f"model.engine={'fast' if b.cuda else 'auto'}",  # one engine per GPU, in both runs
        f"model.gen_batch={b.a.tasks * b.a.group if b.cuda else 0}",  # each GPU decodes its share at once
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
                clock = PhaseClock()
                t0 = time.perf_counter()
                row = eng.train_step(s, clock)
                b.sync()
                t1 = time.perf_counter()
                row["wall_ms"] = (t1 - t0) * 1000
                row["trained"] = json.loads(row["metrics_json"])["trained_sequences"]
                row = _phases(row)
                row.update(_rest_parts(row, t0, t1, clock.marks))
                if dist is not None:  # the ranks' own times (backend/ddp/leader.py: Leader.times)
                    row["ranks"] = json.loads(json.dumps(dist.times))
                else:  # the one process's micro-batches, to set beside each rank's
                    row["shape"] = json.loads(json.dumps(eng.trainer.last_shape))
                rows.append(row)
                b.log(f"ddp {world} rank(s), step {s}: {row['wall_ms']:.0f} ms for {row['n_rollouts']} rollouts ("
                      + ", ".join(f"{name.strip()} {row[k]:.0f}" for k, name in PHASES[1:] + REST_PARTS) + ")")
            engine_name = eng.generator.name
            del eng
    finally:
        store.close()
    timed = rows[1:] or rows
    best = dict(min(timed, key=lambda r: r["wall_ms"]))
    best["engine"] = engine_name
    best["median"] = {k: statistics.median(r[k] for r in timed) for k in ("wall_ms", "train_ms")}
    best["n_timed"] = len(timed)
    del lm
    b.free()
    return best
