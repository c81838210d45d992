"""Multi-turn generation with `model.kv_reuse` off and on, on an SWE-episode-like shape.

    python benchmarks/kv_reuse.py [--episodes 16] [--turns 6] [--prompt 900] [--tool 120] [--new 48]
                                  [--device cpu]

Each of `--episodes` episodes starts from a prompt of `--prompt` tokens less up to a tenth; every
turn the fast engine samples up to `--new` tokens for all episodes at once (temperature 1, one
seed a turn), then each episode's next prompt is its last one, the sampled tokens and a tool's
answer of `--tool` tokens less up to a half. Both engines (`kv_reuse` off, then on) replay the
same episodes: the reusing one takes each episode's earlier turns from its cache. The model is
a random Llama (`--hidden` wide, `--layers` deep) with a LoRA adapter, so nothing is
downloaded; the embedded model's shape is `--hidden 576 --layers 30`. The table gives each
turn's prefill positions computed (rows x the prefill window, left padding included), its seconds (the median of `--repeats` runs), and whether the
two engines sampled the same tokens. On a CPU the reused turn's prefill is its new tokens
only, and that is what the wall time shows. On a GPU the decode share is larger, so the saving
is smaller there.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Tok:
    eos_token_id = 2
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return ""


def build_model(a):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=2 * a.hidden,
                      num_hidden_layers=a.layers, num_attention_heads=9 if a.hidden % 9 == 0 else 4,
                      num_key_value_heads=3 if a.hidden % 9 == 0 else 2, max_position_embeddings=8192,
                      eos_token_id=2, pad_token_id=0)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False))
    return model.float().to(a.device).eval()


def play(engine, a) -> list[dict]:
    """Run the episodes turn by turn; per turn: prefill tokens computed, seconds, sampled ids."""
    import torch

    rng = random.Random(0)
    prompts = [[rng.randrange(3, a.vocab) for _ in range(a.prompt - rng.randrange(a.prompt // 10 + 1))]
               for _ in range(a.episodes)]
    turns = []
    for t in range(a.turns):
        torch.manual_seed(1000 + t)
        t0 = time.perf_counter()
        gens = engine.generate(prompts, a.new, 1.0)
        sec = time.perf_counter() - t0
        computed = engine.prefilled_tokens  # rows x prefill window, padding included
        turns.append({"turn": t, "computed": computed, "s": sec, "ids": [g.ids for g in gens]})
        prompts = [p + g.ids + [rng.randrange(3, a.vocab) for _ in range(a.tool - rng.randrange(a.tool // 2 + 1))]
                   for p, g in zip(prompts, gens)]
    return turns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--prompt", type=int, default=900)
    p.add_argument("--tool", type=int, default=120)
    p.add_argument("--new", type=int, default=48)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    import torch

    from backend.policy.fastgen import FastGenerator

    torch.set_num_threads(a.threads)
    model = build_model(a)
    runs = {False: [], True: []}
    for _ in range(a.repeats):
        for reuse in (False, True):  # alternating, so drift on a shared machine hits both
            eng = FastGenerator(model, Tok(), a.device)
            eng.kv_reuse = reuse
            runs[reuse].append(play(eng, a))
    print(f"{a.episodes} episodes x {a.turns} turns, prompt ~{a.prompt}, tool answer ~{a.tool}, {a.new} new a turn; "
          f"hidden {a.hidden}, {a.layers} layers, {a.device}, {a.threads} thread(s); median of {a.repeats}")
    print("| turn | prefill tokens, off | prefill tokens, on | s, off | s, on | speed-up | same tokens |")
    print("|---|---|---|---|---|---|---|")
    total = {False: 0.0, True: 0.0}
    for t in range(a.turns):
        off = [r[t] for r in runs[False]]
        on = [r[t] for r in runs[True]]
        s_off, s_on = statistics.median(x["s"] for x in off), statistics.median(x["s"] for x in on)
        total[False] += s_off
        total[True] += s_on
        print(f"| {t} | {off[0]['computed']:,} | {on[0]['computed']:,} | {s_off:.2f} | {s_on:.2f} | "
              f"{s_off / s_on:.2f}x | {'yes' if off[0]['ids'] == on[0]['ids'] else 'no'} |")
    print(f"| all | | | {total[False]:.2f} | {total[True]:.2f} | {total[False] / total[True]:.2f}x | |")


if __name__ == "__main__":
    main()
