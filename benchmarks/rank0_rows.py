"""What rank 0 does alone with every rollout of a step, timed at 512 and 1,024 rollouts on this CPU.

    .venv/bin/python benchmarks/rank0_rows.py [CODE_ROOT] [--reps 15]

A data-parallel step's "rest" and "store" phases (`evotui bench --only ddp`) grew with the
number of ranks because rank 0 built the prompts and rows of every rank's rollouts, and it
still writes them all. This times those parts without a GPU, on rollouts as the loop makes
them: the math env's tasks (64 or 128 x 8), the default harness's prompts through the default
model's tokenizer, completions judged and scored by the real evaluator and harness. In the
1,024 case half the rollouts stand for rank 1's share: it builds their prompts
(`task_prompts`) and encodes their row texts (`share.judge`), off rank 0's path. CODE_ROOT (default: this checkout)
lets the same script time another commit's code (a `git worktree`), for a before/after table.
Timings are the best of `--reps`; nothing here is asserted.
"""

from __future__ import annotations

import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else Path(__file__).parents[1]
REPS = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 15
sys.path.insert(0, str(ROOT))

import backend.policy.model as model  # noqa: E402
import backend.rollout as rollout  # noqa: E402
from backend.config import load_config  # noqa: E402
from backend.envs import make_env  # noqa: E402
from backend.harness.loader import Harness  # noqa: E402
from backend.metrics_export import reward_term_means  # noqa: E402
from backend.policy.model import chat_ids  # noqa: E402
from backend.runs import create_run, harness_code  # noqa: E402
from backend.types import Generation  # noqa: E402

MAX_NEW = 128


def tokenizer():
    """The default model's tokenizer (as tests/tiny_llama.py finds it)."""
    import torch
    from transformers import AutoTokenizer

    from backend.policy.model import _gguf_cache_dir, embedded_gguf

    folder, gguf = embedded_gguf()
    cache = _gguf_cache_dir(folder, gguf, torch.float32)
    if cache is not None and (cache / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cache)
    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf)


def best_ms(fn) -> float:
    best = float("inf")
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def prompts(tok, harness, tasks, group: int) -> list[tuple]:
    """As `Engine.collect` builds them: one chat template and decode per task, shared by its group."""
    out = []
    for g, task in enumerate(tasks):
        pids = chat_ids(tok, harness.messages(task))
        text = tok.decode(pids)
        out += [(g, i, task, text, pids) for i in range(group)]
    return out


def scored(tok, harness, env, ps: list[tuple]) -> list:
    """Completions of 1 to 4 sentences ending in an answer (two thirds right), judged and scored."""
    items = []
    for k, p in enumerate(ps):
        text = ("Let me think step by step. First we compute the value carefully, then check it. " * (1 + k % 4)
                + f"<answer>{p[2].answer if k % 3 else '7'}</answer>")
        ids = tok(text, add_special_tokens=False)["input_ids"][:MAX_NEW]
        items.append(rollout.from_generation(p, Generation(ids, text, "stop" if len(ids) < MAX_NEW else "length")))
    rollout.score_all(items, harness, env, MAX_NEW)
    return items


def parts(tok, harness, env, cfg, code, n_tasks: int, ranks: int) -> dict[str, float]:
    tasks = env.sample_tasks(n_tasks, random.Random(0), harness.curriculum)
    # with task_prompts each rank builds its own share's prompts; before it, rank 0 built every task's
    mine = tasks[:n_tasks // ranks] if hasattr(model, "task_prompts") else tasks
    out = {"rank 0: prompts (chat template, decode)": best_ms(lambda: prompts(tok, harness, mine, 8))}
    items = scored(tok, harness, env, prompts(tok, harness, tasks, 8))
    out["group statistics"] = best_ms(lambda: rollout.group_stats(items, harness))
    encode = getattr(rollout, "judged_json", None)
    if encode and ranks > 1:  # rank 0 encodes its own share while judging; rank 1's texts arrive pickled
        own = len(items) // ranks
        out["rank 0: encode its own share's row texts (judge)"] = best_ms(lambda: [encode(s) for s in items[:own]])
        texts = pickle.dumps([encode(s) for s in items[own:]], protocol=pickle.HIGHEST_PROTOCOL)
        out["rank 0: unpickle rank 1's row texts (wait)"] = best_ms(lambda: pickle.loads(texts))
        out["rank 1: encode its share's row texts (off rank 0)"] = best_ms(lambda: [encode(s) for s in items[own:]])
        for s in items:
            s.encoded = encode(s)
    out["rollout rows"] = best_ms(lambda: [rollout.rollout_row(s, 1, 1, 0, MAX_NEW) for s in items])
    out["diagnosis rows"] = best_ms(lambda: [rollout.diagnosis_rows(s, 1, 1, harness.validity) for s in items])
    out["reward term means"] = best_ms(lambda: reward_term_means([s.components for s in items]))
    rows = [rollout.rollout_row(s, 1, 1, 0, MAX_NEW) for s in items]
    diags = [rollout.diagnosis_rows(s, 1, 1, harness.validity) for s in items]

    def commit() -> float:
        store = create_run(Path(tempfile.mkdtemp(prefix="rank0-rows-")) / "run", cfg, code)
        t0 = time.perf_counter()
        store.commit_step({"step": 1, "n_rollouts": len(rows)}, rows, diags, [[] for _ in rows])
        ms = (time.perf_counter() - t0) * 1000
        store.close()
        return ms

    out["store.commit_step"] = min(commit() for _ in range(REPS))
    return out


def main() -> int:
    cfg = load_config(None, ["evolve.enabled=false"])
    code = harness_code(cfg)
    harness, env, tok = Harness.from_code(code), make_env(cfg), tokenizer()
    cols = {n: parts(tok, harness, env, cfg, code, n // 8, n // 512) for n in (512, 1024)}
    names = list(dict.fromkeys(k for c in cols.values() for k in c))
    print(f"rank 0's parts of a step, ms (best of {REPS}), code at {ROOT}")
    print("| part | 512 (1 rank) | 1,024 (2 ranks) |\n|---|---:|---:|")
    for k in names:
        print(f"| {k} | " + " | ".join(f"{c[k]:.1f}" if k in c else "-" for c in cols.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
