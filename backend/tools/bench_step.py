"""`evotui bench --only step`: whole GRPO steps of the real loop, phase by phase.

On CUDA the hf engine with the fixed micro-batch is the baseline (`--skip-hf` leaves it
out); then today's step; then one step of each `--step-variants` (trainer settings as
`--set` overrides) against today's, in the same process. Each keeps its fastest step
after the first (warm-up) and the 95% interval of the steps after the first; the host
work of a step is split by function (backend/tools/bench_overhead.py).

`--step-domain` picks the domain of the steps: math (the default), code or swe, each with its
default harness plus a small brevity reward so every group trains (bench_common.bench_harness);
swe draws its tasks from every level of `--step-swe-levels` (default 0,1). A code or swe row
names its domain and levels in the measure column, and its note splits the step into
generation / tools+tests (the env's test runs and tool calls, and the harness) / training.
`--step-new` caps new tokens per turn: 256 and 192 are what the code and swe harnesses ask for.

The measurements on one GPU, each against the hf baseline step of the same run:

    evotui bench -- --only step --step-domain code --tasks 64 --group 8 --step-new 256 --out /tmp/bench-code
    evotui bench -- --only step --step-domain swe --step-swe-levels 0,1 --tasks 32 --group 8 --step-new 192 \
        --out /tmp/bench-swe-32
    evotui bench -- --only step --step-domain swe --step-swe-levels 0,1 --tasks 64 --group 8 --step-new 192 \
        --out /tmp/bench-swe-64
"""

from __future__ import annotations

import importlib.util
import json
import random
import tempfile
from collections import Counter
from pathlib import Path

from .bench_common import Row, bench_harness, interval


STEP_DOMAINS = ("math", "code", "swe")
MATH_PROMPT_TOKENS = 160
"""Prompt room the memory plan gives a math step: the default harness's math prompts are ~80-130 tokens."""


def domain_sets(domain: str, swe_levels: str) -> list[str]:
    """The `--set` overrides of a step on `domain` besides its harness: swe plays `swe_levels` alone,
    and its held-out mix is the default mix's weights of those levels (a turn's tokens are bounded
    by `train.max_new_tokens_cap`, which `one_step` sets to `--step-new`, as every domain's are)."""
    if domain == "math":
        return []
    if domain == "code":
        return ["domain=code"]
    from backend.config import SweConfig
    from backend.envs.swe.env import parse_mix

    levels = [int(x) for x in swe_levels.replace(" ", "").split(",") if x]
    weights = parse_mix(SweConfig().test_mix)
    mix = ",".join(f"{lv}:{weights.get(lv, 1):g}" for lv in levels)
    return ["domain=swe", f"swe.levels='{','.join(map(str, levels))}'", f"swe.test_mix='{mix}'"]


def domain_label(b) -> str:
    """What a step row's measure says of its domain: nothing for math (its rows as they always were)."""
    if b.a.step_domain == "swe":
        return f"swe levels {b.a.step_swe_levels.replace(' ', '')}, "
    return "" if b.a.step_domain == "math" else f"{b.a.step_domain}, "


def plan_length(eng, domain: str, new: int, n: int) -> int:
    """Tokens of the longest sequence the memory plan sizes a training pass for: prompt + new tokens.

    Math: `MATH_PROMPT_TOKENS`. Other domains: the longest prompt of `n` tasks drawn as a step draws
    them (code ~105-160 tokens, swe level 0 ~270-660, level 1 ~760-1100 with the default tokenizer);
    multi-turn swe levels add the whole episode (`swe.max_episode_tokens`), not one turn's tokens.
    """
    if domain == "math":
        return MATH_PROMPT_TOKENS + new
    tasks = eng.env.sample_tasks(n, random.Random(0), eng.harness.curriculum)
    prompt = max(len(eng.chat_ids_fn(eng.harness.messages(t))) for t in tasks)
    turns = getattr(eng.env, "takes_turns", lambda _tasks: False)(tasks)
    return prompt + (eng.cfg.swe.max_episode_tokens if turns else new)


def recorded_tasks(env) -> list[list]:
    """The tasks each training step draws from `env`, in order (the row's levels drawn)."""
    steps: list[list] = []
    sample = env.sample_tasks

    def recording(n, rng, curriculum):
        tasks = sample(n, rng, curriculum)
        steps.append(tasks)
        return tasks
    env.sample_tasks = recording
    return steps


def one_step(b, engine: str, micro: int | None, fused: bool, steps: int = 2, tag: str = "",
             extra: tuple[str, ...] = (), domain: str = "math") -> dict | None:
    """Run `steps` real loop steps in a fresh run; returns the fastest step after the first (warm-up).

    `micro=None`: the micro-batch from memory.py (CUDA). `fused=False`: the trainer uses
    grpo.checkpointed_token_logprobs in place of its own fused grpo.token_logprobs.
    `extra`: more `--set` overrides (a trainer setting against today's). `domain`: math, code or
    swe (with the levels of `--step-swe-levels`), each with `bench_harness(domain)`.
    """
    from backend.policy import grpo
    from backend.config import load_config
    from backend.loop import Engine
    from backend.policy.model import load_policy
    from backend.progress import StepProgress
    from backend.runs import create_run, harness_code

    from .bench_overhead import clocked, split_wait

    sets = [f"train.tasks_per_step={b.a.tasks}", f"train.group_size={b.a.group}",
            f"train.max_new_tokens_cap={b.a.step_new}", "evolve.enabled=false", f"model.engine={engine}",
            f"model.device={b.device}", f"model.name={b.a.model}", f"model.gguf_file={b.a.gguf}",
            f"model.threads={b.a.threads}", "train.lr=1e-6", f"train.micro_batch={micro or 8}",
            f"train.auto_micro_batch={'true' if micro is None else 'false'}", f"harness={bench_harness(domain)}",
            *domain_sets(domain, b.a.step_swe_levels), *extra]
    cfg = load_config(None, sets)
    run_dir = Path(tempfile.mkdtemp(prefix="evotui-bench-")) / f"run{tag}"
    store = create_run(run_dir, cfg, harness_code(cfg))
    lm = load_policy(cfg.model)
    eng = Engine(run_dir, cfg, store, quiet=True, lm=lm)
    if micro is None and b.cuda:
        from backend.policy import memory
        from backend.policy.fastgen import Spec, unwrap

        T = plan_length(eng, domain, b.a.step_new, 4 * b.a.tasks)
        cfg.train.micro_batch = memory.balance(b.a.tasks * b.a.group, memory.pick_micro_batch(
            Spec.of(unwrap(lm.model).config), T, memory.free_bytes(b.device)))
    drawn = recorded_tasks(eng.env)
    rows = []
    plain = grpo.token_logprobs
    if not fused:
        grpo.token_logprobs = grpo.checkpointed_token_logprobs
    try:
        for s in range(1, steps + 1):
            b.sync()
            with clocked({}) as phases:
                row = eng.train_step(s, StepProgress(steps, quiet=True).start(s))
            metrics = json.loads(row["metrics_json"])
            row["phases"] = split_wait(phases, metrics.get("ckpt_wait_ms", 0.0))
            row["trained"] = trained = metrics.get("trained_sequences")
            row["ckpt_ms"] = (metrics.get("ckpt_ms", 0.0) + metrics.get("ckpt_wait_ms", 0.0)
                              + metrics.get("ckpt_settle_ms", 0.0))  # overlapped: the last step's, waited for here
            row["shape"] = dict(eng.trainer.last_shape)
            row["levels"] = dict(sorted(Counter(t.meta.get("level") for t in (drawn or [[]])[-1]).items()))
            rows.append(row)
            b.log(f"step {tag} {s}: {row['total_ms']:.0f} ms (gen {row['gen_ms']:.0f}, tools+tests "
                  f"{row['score_ms']:.0f}, train {row['train_ms']:.0f}, {trained} sequences trained)")
        eng.settle_checkpoint()
    finally:
        grpo.token_logprobs = plain
    for r in rows:
        r["overhead_ms"] = r["score_ms"] + r["diagnose_ms"] + r["store_ms"]
    row = min(rows[1:] or rows, key=lambda r: r["total_ms"])
    row["steps_ms"] = {k: [r[k] for r in rows[1:] or rows]
                       for k in ("total_ms", "gen_ms", "score_ms", "train_ms", "store_ms", "overhead_ms")}
    row["domain"] = domain
    row["engine"] = eng.generator.name
    row["micro_batch"] = row["shape"].get("micro_batch", cfg.train.micro_batch)
    store.close()
    del eng, lm
    b.free()
    return row


def split_note(r: dict) -> str:
    """A code or swe step's phases: "; generation 1.20 s / tools+tests 0.40 s / training 2.10 s (...)"; math: ""."""
    if r["domain"] == "math":
        return ""
    levels = ", ".join(f"{lv}: {n}" for lv, n in r.get("levels", {}).items())
    return (f"; generation {r['gen_ms'] / 1000:.2f} s / tools+tests {r['score_ms'] / 1000:.2f} s / training "
            f"{r['train_ms'] / 1000:.2f} s (diagnosis {r['diagnose_ms'] / 1000:.2f} s, store "
            f"{r['store_ms'] / 1000:.2f} s); tasks by level {{{levels}}}")


def step_rows(b, base: dict | None, ours: dict, base_name: str) -> None:
    n = ours["n_rollouts"]

    def s(r, k):
        return f"{r[k] / 1000:.2f} s" if r else ""

    def rat(k):
        return f"{base[k] / max(ours[k], 1e-9):.1f}x faster" if base else ""

    what = f"{domain_label(b)}{b.a.tasks} tasks x {b.a.group} = {n} rollouts, <= {b.a.step_new} new"
    b.add(Row("step", f"GRPO step, {what}", s(base, "total_ms"), s(ours, "total_ms"), rat("total_ms"),
              f"{base_name} vs {ours['engine']} engine, micro-batch {base['micro_batch'] if base else '-'} vs "
              f"{ours['micro_batch']}{split_note(ours)}", {"baseline": base, "ours": ours}))
    b.add(Row("step", "  generate", s(base, "gen_ms"), s(ours, "gen_ms"), rat("gen_ms"),
              f"{ours['tokens']} tokens"))
    if ours["domain"] != "math":
        b.add(Row("step", "  tools+tests", s(base, "score_ms"), s(ours, "score_ms"), rat("score_ms"),
                  "the env's test runs and tool calls, and the harness"))
    b.add(Row("step", "  train", s(base, "train_ms"), s(ours, "train_ms"), rat("train_ms"),
              f"{ours['trained']} sequences" + (f" vs {base['trained']}" if base else "")))
    for r, who in ((ours, "ours"),) + (((base, "baseline"),) if base else ()):
        over = r["overhead_ms"]
        per_step = r["steps_ms"]["overhead_ms"]
        b.add(Row("step", f"  engine overhead ({who})", "", f"{over:.0f} ms", f"{over / r['total_ms']:.1%}",
                  f"of the step: scoring {r['score_ms']:.0f} ms, diagnosis {r['diagnose_ms']:.0f} ms, "
                  f"store {r['store_ms']:.0f} ms; outside it: building rows, and the checkpoint's files "
                  f"beyond the store's inserts {r.get('ckpt_ms', 0.0):.0f} ms; ms per step after the first: "
                  f"{interval(per_step, '{:.0f}')}, of which store {interval(r['steps_ms']['store_ms'], '{:.0f}')}"))
        if r.get("phases"):
            from .bench_overhead import breakdown

            b.add(Row("step", f"  host work by function ({who})", "", "", "", breakdown(r["phases"], r["total_ms"])))


def bench_step(b) -> dict | None:
    domain = b.a.step_domain
    if b.a.random_init:
        b.add(Row("step", "GRPO step", note="skipped with --random-init: the loop loads real weights"))
        return None
    if domain == "math" and importlib.util.find_spec("reasoning_gym") is None:
        b.add(Row("step", "GRPO step", note="skipped: the math env needs reasoning-gym"))
        return None
    micro = None if b.cuda else b.a.micro
    if b.cuda and not b.a.skip_hf:
        # plain generate needs no warm-up step
        base = one_step(b, "hf", 8, False, steps=1, tag="-hf", domain=domain)
    else:
        base = None
    ours = one_step(b, "auto", micro, True, steps=b.a.steps, tag="-ours", domain=domain)
    step_rows(b, base, ours, "hf" if base else "")
    for name, sets in step_variants(b.a.step_variants):
        new = one_step(b, "auto", micro, True, steps=b.a.steps, tag=f"-{name}", extra=sets, domain=domain)
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

    b.add(Row("step", f"GRPO step, {domain_label(b)}{name} vs today", s(today, "total_ms"), s(new, "total_ms"),
              rat("total_ms"), f"{', '.join(sets)}; best step after the first of {b.a.steps}; {spread('total_ms')}"
              f"{split_note(new)}",
              {"today": today, "ours": new}))
    b.add(Row("step", f"  {name}: generate", s(today, "gen_ms"), s(new, "gen_ms"), rat("gen_ms")))
    if new["domain"] != "math":
        b.add(Row("step", f"  {name}: tools+tests", s(today, "score_ms"), s(new, "score_ms"), rat("score_ms"),
                  spread("score_ms")))
    b.add(Row("step", f"  {name}: train", s(today, "train_ms"), s(new, "train_ms"), rat("train_ms"),
              f"{spread('train_ms')}; today {_padding(today)} (micro-batch {today['micro_batch']}); "
              f"{name} {_padding(new)} (<= {new['micro_batch']} rows); {new['trained']} vs {today['trained']} "
              f"sequences"))
    b.add(Row("step", f"  {name}: engine overhead", f"{over(today):.0f} ms", f"{over(new):.0f} ms",
              f"{over(new) / new['total_ms']:.1%} of step", f"scoring {new['score_ms']:.0f}, diagnosis "
              f"{new['diagnose_ms']:.0f}, store {new['store_ms']:.0f} ms; checkpoint and building rows "
              f"{new['ckpt_ms']:.0f} ms (today {today['ckpt_ms']:.0f})"))
