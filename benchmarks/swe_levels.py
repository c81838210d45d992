"""Base resolve rate of a model on the one-shot SWE levels (0: the buggy file shown; 1: find the file).

For each level in --levels: the first --n tasks of the frozen --split set of
SweEnv (backend/envs/swe/levels.py; a fixed hashed order), prompted with the
--harness's PROMPT (default: the expert SWE harness, which trains at level 0),
answered by the model (greedy by default, as the run's held-out evaluation),
judged by SweEnv (the edit applied to a copy of the repository, the hidden
tests run in the sandbox). Prints resolved of n with a Wilson 95% interval and
the shaping facts (well-formed edit, applied, right file, right line), then
the same per mutation family. Generation stops once a row's first edit is
complete (a REPLACE marker, or a closed code block with a def: the env reads
the first edit only; --full generates to --max-new-tokens like the run does).

    .venv/bin/python benchmarks/swe_levels.py --levels 0 --n 120
    .venv/bin/python benchmarks/swe_levels.py --from-json rows.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FACTS = ("well_formed", "applied", "right_file", "right_line")


def first_edit_done(text: str) -> bool:
    """The first edit the env would read is complete: a REPLACE marker, or a closed code block of defs."""
    if "SEARCH" in text and "REPLACE" in text.split("SEARCH", 1)[1]:
        return True
    m = re.search(r"```(?:python|py)?[ \t]*\n(.*?)```", text, re.S)
    return bool(m and re.search(r"^\s*def \w+", m.group(1), re.M))


def replace_stop(tok, width: int):
    """Stop a row once its first edit is complete (what the env reads stays the same)."""
    import torch
    from transformers import StoppingCriteria

    class ReplaceStop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            texts = tok.batch_decode(input_ids[:, width:], skip_special_tokens=True)
            return torch.tensor([first_edit_done(t) for t in texts], dtype=torch.bool)

    return ReplaceStop()


def generate(lm, tok, prompts: list[list[int]], args) -> list[str]:
    import torch
    from transformers import StoppingCriteriaList

    from backend.policy.generate import left_pad
    from backend.policy.stops import eos_ids

    ids, mask = left_pad(prompts, tok.pad_token_id)  # (B, T)
    kw = dict(max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=eos_ids(lm, tok),
              do_sample=args.temperature > 0)
    if args.temperature > 0:
        kw.update(temperature=args.temperature, top_p=1.0, top_k=0)
    if not args.full:
        kw["stopping_criteria"] = StoppingCriteriaList([replace_stop(tok, ids.shape[1])])
    with torch.no_grad():
        seqs = lm.generate(input_ids=ids, attention_mask=mask, **kw)
    return tok.batch_decode(seqs[:, ids.shape[1]:], skip_special_tokens=True)


def table(name: str, rows: list[dict]) -> list[str]:
    from backend.evolve.stats import wilson_interval

    groups = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    lines = [f"| {name} | n | resolved | rate | 95% Wilson | " + " | ".join(FACTS) + " |",
             "|---|---|---|---|---|" + "---|" * len(FACTS)]
    for g in sorted(groups, key=str):
        rs = groups[g]
        k, n = sum(r["correct"] for r in rs), len(rs)
        lo, hi = wilson_interval(k, n)
        facts = " | ".join(str(sum(bool(r[f]) for r in rs)) for f in FACTS)
        lines.append(f"| {g} | {n} | {k} | {k / n:.3f} | {lo:.3f}-{hi:.3f} | {facts} |")
    return lines


def measure(tasks, env, harness, lm, tok, args) -> list[dict]:
    from backend.policy.model import chat_ids

    rows: list[dict] = []
    for i in range(0, len(tasks), args.batch):
        part = tasks[i:i + args.batch]
        texts = generate(lm, tok, [chat_ids(tok, harness.messages(t)) for t in part], args)
        for t, text, (v, obs) in zip(part, texts, env._judge_shots(part, texts)):
            rows.append({"task_id": t.id, "level": t.meta["level"], "family": t.meta["family"],
                         "variant": t.meta["variant"],
                         "correct": bool(v.correct), "status": v.status, "completion": text,
                         **{f: bool(obs.get(f)) for f in FACTS}})
        print(f"  {sum(r['correct'] for r in rows)} of {len(rows)} resolved so far", file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


def print_tables(rows: list[dict], split: str) -> None:
    for r in rows:
        r["group"] = f"level {r['level']}"
    print("\n".join(table(split, rows)))
    for r in rows:
        r["group"] = f"L{r['level']} {r['family']}"
    print("\n".join(table("by family", rows)))
    for r in rows:
        r["group"] = f"L{r['level']} {r.get('variant', '?')}"
    print("\n".join(table("by prompt variant", rows)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="0", help="comma-separated one-shot levels (0, 1)")
    ap.add_argument("--split", default="validation", choices=("train", "validation"),
                    help="train: a seeded sample of training tasks (tune families there); the test set is not offered")
    ap.add_argument("--n", type=int, default=120, help="tasks per level (a prefix of the frozen set)")
    ap.add_argument("--skip", type=int, default=0, help="start after this many tasks (split a long measurement)")
    ap.add_argument("--from-json", nargs="*", default=[], help="print the tables of saved --json rows (no model)")
    ap.add_argument("--harness", default="swe_expert", help="default harness whose PROMPT is used")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the run's held-out evaluation)")
    ap.add_argument("--max-new-tokens", type=int, default=192, help="the expert harness's max_new_tokens")
    ap.add_argument("--full", action="store_true", help="do not stop rows at their first complete edit")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--model", default="", help="model name or path (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--json", default="", help="write every row (with its completion) here")
    args = ap.parse_args(argv)
    if args.from_json:
        return print_tables([r for p in args.from_json for r in json.loads(Path(p).read_text())], "saved rows")

    import torch

    from backend.config import ModelConfig, SweConfig
    from backend.envs.swe import SweEnv
    from backend.harness.loader import load_default
    from backend.policy.model import load_base

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    mcfg = ModelConfig(device="cpu") if not args.model else ModelConfig(device="cpu", name=args.model)
    lm, tok, _, _ = load_base(mcfg)
    lm.eval()
    harness = load_default(args.harness)
    all_rows, t0 = [], time.time()
    for level in [int(x) for x in args.levels.split(",") if x.strip()]:
        env = SweEnv(SweConfig(levels=str(level), leak_canaries=False))
        want = args.skip + args.n
        pool = (env.sample_tasks(want, random.Random(level), {"level": level}) if args.split == "train"
                else [t for t in env.validation_tasks() if t.meta["level"] == level])
        all_rows += measure(pool[args.skip:want], env, harness, lm, tok, args)
    print_tables(all_rows, args.split)
    mode = "greedy" if args.temperature <= 0 else f"temperature {args.temperature}"
    print(f"\n{mode}, max_new_tokens {args.max_new_tokens}, harness {args.harness}, "
          f"{'full' if args.full else 'stop at the first complete edit'}, {time.time() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1))


if __name__ == "__main__":
    main()
