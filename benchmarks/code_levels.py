"""Base pass rate of a model on the generated code levels (and HumanEval), one table per level.

For each level in --levels: the first --n tasks of the frozen --split set
(backend/envs/codegen), prompted with the code harness's PROMPT, answered by
the model (greedy by default, as the run's held-out evaluation; --temperature
samples instead), judged by CodeEnv in the sandbox. Prints passed of n with a
Wilson 95% interval, how many answers had a fenced block, and the mean share of
hidden cases passed, then the same per family. Generation stops once a row has
closed its first code block (the evaluator reads only code blocks; --full
generates to --max-new-tokens like the run does).

    .venv/bin/python benchmarks/code_levels.py --levels 0 --n 200
    .venv/bin/python benchmarks/code_levels.py --levels 0,1,2,3 --n 40 --humaneval
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fence_stop(tok, width: int):
    """Stop a row once its new text holds two fences (a code block opened and closed)."""
    import torch
    from transformers import StoppingCriteria

    class FenceStop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            texts = tok.batch_decode(input_ids[:, width:], skip_special_tokens=True)
            return torch.tensor([t.count("```") >= 2 for t in texts], dtype=torch.bool)

    return FenceStop()


def generate(lm, tok, prompts: list[list[int]], args) -> list[str]:
    """Completions of `prompts`, in batches of --batch."""
    import torch
    from transformers import StoppingCriteriaList

    from backend.policy.generate import left_pad
    from backend.policy.stops import eos_ids

    eos = eos_ids(lm, tok)
    out = []
    for i in range(0, len(prompts), args.batch):
        ids, mask = left_pad(prompts[i:i + args.batch], tok.pad_token_id)  # (B, T)
        kw = dict(max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=eos,
                  do_sample=args.temperature > 0)
        if args.temperature > 0:
            kw.update(temperature=args.temperature, top_p=1.0, top_k=0)
        if not args.full:
            kw["stopping_criteria"] = StoppingCriteriaList([fence_stop(tok, ids.shape[1])])
        with torch.no_grad():
            seqs = lm.generate(input_ids=ids, attention_mask=mask, **kw)
        out += tok.batch_decode(seqs[:, ids.shape[1]:], skip_special_tokens=True)
    return out


def table(name: str, rows: list[dict]) -> list[str]:
    from backend.evolve.stats import wilson_interval

    groups = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    lines = [f"| {name} | n | passed | rate | 95% Wilson | fenced | mean cases passed |",
             "|---|---|---|---|---|---|---|"]
    for g in sorted(groups, key=str):
        rs = groups[g]
        k, n = sum(r["correct"] for r in rs), len(rs)
        lo, hi = wilson_interval(k, n)
        frac = sum(r["frac"] for r in rs) / n
        lines.append(f"| {g} | {n} | {k} | {k / n:.3f} | {lo:.3f}-{hi:.3f} | {sum(r['fenced'] for r in rs)} "
                     f"| {frac:.3f} |")
    return lines


def measure(tasks, env, harness, lm, tok, args) -> list[dict]:
    """Generate and judge batch by batch, printing the running pass count (a long run shows early)."""
    from backend.policy.model import chat_ids

    rows: list[dict] = []
    for i in range(0, len(tasks), args.batch):
        part = tasks[i:i + args.batch]
        texts = generate(lm, tok, [chat_ids(tok, harness.messages(t)) for t in part], args)
        for t, text, v in zip(part, texts, env.evaluate_many(list(zip(part, texts)))):
            total = v.detail.get("total") or 1
            passed = v.detail.get("passed") if v.detail.get("total") else int(v.correct)
            rows.append({"task_id": t.id, "level": t.meta["level"], "family": t.meta.get("family", "humaneval"),
                         "correct": bool(v.correct), "status": v.status, "frac": (passed or 0) / total,
                         "fenced": "```" in text, "completion": text})
        print(f"  {sum(r['correct'] for r in rows)} of {len(rows)} passed so far", file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


def print_saved(paths: list[str]) -> None:
    """The tables of rows saved by earlier runs (one measurement split over several processes)."""
    rows = [r for p in paths for r in json.loads(Path(p).read_text())]
    for r in rows:
        r["group"] = f"level {r['level']}" if r["family"] != "humaneval" else "humaneval (held out)"
    print("\n".join(table("saved rows", rows)))
    for r in rows:
        r["group"] = r["family"]
    print("\n".join(table("by family", rows)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="0", help="comma-separated levels (0-3)")
    ap.add_argument("--split", default="validation", choices=("train", "validation", "test"),
                    help="train: a seeded sample of training tasks (tune families there, never on the held-out sets)")
    ap.add_argument("--n", type=int, default=200, help="tasks per level (a prefix of the frozen set)")
    ap.add_argument("--skip", type=int, default=0, help="start after this many tasks (split a long measurement)")
    ap.add_argument("--from-json", nargs="*", default=[], help="print the tables of saved --json rows (no model)")
    ap.add_argument("--humaneval", action="store_true", help="also HumanEval's held-out problems (out of distribution)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the run's held-out evaluation)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="the run's eval.max_new_tokens")
    ap.add_argument("--full", action="store_true", help="do not stop rows at their first closed code block")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--model", default="", help="model name or path (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--json", default="", help="write every row (with its completion) here")
    args = ap.parse_args(argv)
    if args.from_json:
        return print_saved(args.from_json)

    import torch

    from backend.config import CodeConfig, ModelConfig
    from backend.envs.code import CodeEnv
    from backend.harness.loader import load_default
    from backend.policy.model import load_base

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    mcfg = ModelConfig(device="cpu") if not args.model else ModelConfig(device="cpu", name=args.model)
    lm, tok, _, _ = load_base(mcfg)
    lm.eval()
    harness = load_default("code")
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    all_rows, t0 = [], time.time()
    for level in levels:
        env = CodeEnv(CodeConfig(heldout_levels=[level]))
        want = args.skip + args.n
        tasks = (env.sample_tasks(want, random.Random(level), {"level": level}) if args.split == "train" else
                 env.validation_tasks(want) if args.split == "validation" else env.test_tasks(want))[args.skip:]
        rows = measure(tasks, env, harness, lm, tok, args)
        all_rows += rows
        for r in rows:
            r["group"] = f"level {level}"
        print("\n".join(table(f"{args.split}, level {level}", rows)))
        for r in rows:
            r["group"] = r["family"]
        print("\n".join(table(f"level {level} by family", rows)) + "\n", flush=True)
    if args.humaneval:
        env = CodeEnv(CodeConfig(source="humaneval"))
        rows = measure(env.ood_tasks()[:args.n], env, harness, lm, tok, args)
        for r in rows:
            r["group"] = "humaneval (held out)"
        all_rows += rows
        print("\n".join(table("HumanEval, out of distribution", rows)))
    mode = "greedy" if args.temperature <= 0 else f"temperature {args.temperature}"
    print(f"\n{mode}, max_new_tokens {args.max_new_tokens}, {'full' if args.full else 'stop at the closed block'}, "
          f"{time.time() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1))


if __name__ == "__main__":
    main()
