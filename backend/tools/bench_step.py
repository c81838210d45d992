"""`evotui bench --only step`: whole GRPO steps of the real loop, phase by phase.

On CUDA the hf engine with the fixed micro-batch is the baseline (`--skip-hf` leaves it
out); then today's step; then one step of each `--step-variants` (trainer settings as
`--set` overrides) against today's, in the same process. Each keeps its fastest step
after the first (warm-up) and the 95% interval of the steps after the first; the host
work of a step is split by function (backend/tools/bench_overhead.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .bench_common import Row, bench_harness, interval


def one_step(b, engine: str, micro: int | None, fused: bool, steps: int = 2, tag: str = "",
             extra: tuple[str, ...] = ()) -> dict | None:
    """Run `steps` real loop steps in a fresh run; returns the fastest step after the first (warm-up).

    `micro=None`: the micro-batch from memory.py (CUDA). `fused=False`: the trainer uses
    grpo.checkpointed_token_logprobs in place of its own fused grpo.token_logprobs.
    `extra`: more `--set` overrides (a trainer setting against today's).
    """
    from backend.policy import grpo
    from backend.config import load_config
    from backend.loop import Engine
    from backend.policy.model import load_policy
    from backend.progress import StepProgress
    from backend.runs import create_run, harness_code

    from .bench_overhead import clocked

    sets = [f"train.tasks_per_step={b.a.tasks}", f"train.group_size={b.a.group}",
            f"train.max_new_tokens_cap={b.a.step_new}", "evolve.enabled=false", f"model.engine={engine}",
            f"model.device={b.device}", f"model.name={b.a.model}", f"model.gguf_file={b.a.gguf}",
            f"model.threads={b.a.threads}", "train.lr=1e-6", f"train.micro_batch={micro or 8}",
            f"train.auto_micro_batch={'true' if micro is None else 'false'}", f"harness={bench_harness()}",
            *extra]
    cfg = load_config(None, sets)
    run_dir = Path(tempfile.mkdtemp(prefix="evotui-bench-")) / f"run{tag}"
    store = create_run(run_dir, cfg, harness_code(cfg))
    lm = load_policy(cfg.model)
    eng = Engine(run_dir, cfg, store, quiet=True, lm=lm)
    if micro is None and b.cuda:
        from backend.policy import memory
        from backend.policy.fastgen import Spec, unwrap

        T = 160 + b.a.step_new  # the default harness's math prompts are ~80-130 tokens
        cfg.train.micro_batch = memory.balance(b.a.tasks * b.a.group, memory.pick_micro_batch(
            Spec.of(unwrap(lm.model).config), T, memory.free_bytes(b.device)))
    rows = []
    plain = grpo.token_logprobs
    if not fused:
        grpo.token_logprobs = grpo.checkpointed_token_logprobs
    try:
        for s in range(1, steps + 1):
            b.sync()
            with clocked({}) as phases:
                row = eng.train_step(s, StepProgress(steps, quiet=True).start(s))
            row["phases"] = phases
            metrics = json.loads(row["metrics_json"])
            row["trained"] = trained = metrics.get("trained_sequences")
            row["ckpt_ms"] = metrics.get("ckpt_ms", 0.0)
            row["shape"] = dict(eng.trainer.last_shape)
            rows.append(row)
            b.log(f"step {tag} {s}: {row['total_ms']:.0f} ms (gen {row['gen_ms']:.0f}, train {row['train_ms']:.0f}, "
                  f"{trained} sequences trained)")
    finally:
        grpo.token_logprobs = plain
    row = min(rows[1:] or rows, key=lambda r: r["total_ms"])
    row["steps_ms"] = {k: [r[k] for r in rows[1:] or rows] for k in ("total_ms", "gen_ms", "train_ms")}
    row["engine"] = eng.generator.name
    row["micro_batch"] = row["shape"].get("micro_batch", cfg.train.micro_batch)
    store.close()
    del eng, lm
    b.free()
    return row


def step_rows(b, base: dict | None, ours: dict, base_name: str) -> None:
    n = ours["n_rollouts"]

    def s(r, k):
        return f"{r[k] / 1000:.2f} s" if r else ""

    def rat(k):
        return f"{base[k] / max(ours[k], 1e-9):.1f}x faster" if base else ""

    what = f"{b.a.tasks} tasks x {b.a.group} = {n} rollouts, <= {b.a.step_new} new"
    b.add(Row("step", f"GRPO step, {what}", s(base, "total_ms"), s(ours, "total_ms"), rat("total_ms"),
              f"{base_name} vs {ours['engine']} engine, micro-batch {base['micro_batch'] if base else '-'} vs "
              f"{ours['micro_batch']}", {"baseline": base, "ours": ours}))
    b.add(Row("step", "  generate", s(base, "gen_ms"), s(ours, "gen_ms"), rat("gen_ms"),
              f"{ours['tokens']} tokens"))
    b.add(Row("step", "  train", s(base, "train_ms"), s(ours, "train_ms"), rat("train_ms"),
              f"{ours['trained']} sequences" + (f" vs {base['trained']}" if base else "")))
    for r, who in ((ours, "ours"),) + (((base, "baseline"),) if base else ()):
        over = r["score_ms"] + r["diagnose_ms"] + r["store_ms"]
        b.add(Row("step", f"  engine overhead ({who})", "", f"{over:.0f} ms", f"{over / r['total_ms']:.1%}",
                  f"of the step: scoring {r['score_ms']:.0f} ms, diagnosis {r['diagnose_ms']:.0f} ms, "
                  f"store {r['store_ms']:.0f} ms; outside it: checkpoint and building rows "
                  f"{r.get('ckpt_ms', 0.0):.0f} ms"))
        if r.get("phases"):
            from .bench_overhead import breakdown

            b.add(Row("step", f"  host work by function ({who})", "", "", "", breakdown(r["phases"], r["total_ms"])))


def bench_step(b) -> dict | None:
    if b.a.random_init:
        b.add(Row("step", "GRPO step", note="skipped with --random-init: the loop loads real weights"))
        return None
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        b.add(Row("step", "GRPO step", note="skipped: the math env needs reasoning-gym"))
        return None
    micro = None if b.cuda else b.a.micro
    if b.cuda and not b.a.skip_hf:
        base = one_step(b, "hf", 8, False, steps=1, tag="-hf")  # plain generate needs no warm-up step
    else:
        base = None
    ours = one_step(b, "auto", micro, True, steps=b.a.steps, tag="-ours")
    step_rows(b, base, ours, "hf" if base else "")
    for name, sets in step_variants(b.a.step_variants):
        new = one_step(b, "auto", micro, True, steps=b.a.steps, tag=f"-{name}", extra=sets)
        variant_rows(b, ours, new, name, sets)
    return ours


def step_variants(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """`--step-variants` "name:key=value,key=value;name2:..." as (name, overrides) pairs."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if part:
            name, _, sets = part.partition(":")
            out.append((name.strip(), tuple(x.strip() for x in sets.split(",") if x.strip())))
    return out


def _padding(r: dict) -> str:
    sh = r.get("shape") or {}
    if not sh.get("padded_tokens"):
        return "-"
    return f"{1 - sh['seq_tokens'] / sh['padded_tokens']:.0%} padding, {sh['micro_batches']} passes"


def variant_rows(b, today: dict, new: dict, name: str, sets: tuple[str, ...]) -> None:
    """A step with `sets` against today's step, both of this process: each phase side by side."""
    def s(r, k):
        return f"{r.get(k, 0) / 1000:.2f} s"

    def rat(k):
        return f"{today.get(k, 0) / max(new.get(k, 0), 1e-9):.2f}x faster"

    def over(r):
        return r["score_ms"] + r["diagnose_ms"] + r["store_ms"]

    def spread(k):
        return (f"s per step after the first: today {interval([x / 1000 for x in today['steps_ms'][k]])}, "
                f"{name} {interval([x / 1000 for x in new['steps_ms'][k]])}")

    b.add(Row("step", f"GRPO step, {name} vs today", s(today, "total_ms"), s(new, "total_ms"), rat("total_ms"),
              f"{', '.join(sets)}; best step after the first of {b.a.steps}; {spread('total_ms')}",
              {"today": today, "ours": new}))
    b.add(Row("step", f"  {name}: generate", s(today, "gen_ms"), s(new, "gen_ms"), rat("gen_ms")))
    b.add(Row("step", f"  {name}: train", s(today, "train_ms"), s(new, "train_ms"), rat("train_ms"),
              f"{spread('train_ms')}; today {_padding(today)} (micro-batch {today['micro_batch']}); "
              f"{name} {_padding(new)} (<= {new['micro_batch']} rows); {new['trained']} vs {today['trained']} "
              f"sequences"))
    b.add(Row("step", f"  {name}: engine overhead", f"{over(today):.0f} ms", f"{over(new):.0f} ms",
              f"{over(new) / new['total_ms']:.1%} of step", f"scoring {new['score_ms']:.0f}, diagnosis "
              f"{new['diagnose_ms']:.0f}, store {new['store_ms']:.0f} ms; checkpoint and building rows "
              f"{new['ckpt_ms']:.0f} ms (today {today['ckpt_ms']:.0f})"))
