"""A batch's completion texts from its token ids: the tokenizer's `decode` a row at a time (the
engines before) against `stops.completion_texts` (the Rust backend's `decode_batch`), in one run.

    .venv/bin/python benchmarks/completion_texts.py [--rows 512] [--tokens 256] [--repeats 10]

The embedded default model's tokenizer; --rows rows of --tokens random token ids (every 64th an
EOS), as the decode bench's batch at 512 x 256 hands them over. The paths alternate, each after a
warm-up; prints ms a batch (mean +- 95% t-interval over --repeats, best) and whether the texts
are the same. `decode_batch` decodes rows in parallel threads (RAYON_NUM_THREADS caps them).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    from backend.policy.model import embedded_gguf
    from backend.policy.stops import completion_texts
    from benchmarks.code_step import interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    folder, gguf = embedded_gguf()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    eos = [tok.eos_token_id]
    rng = random.Random(0)
    rows = [[eos[0] if j % 64 == 63 else rng.randrange(len(tok)) for j in range(args.tokens)]
            for _ in range(args.rows)]
    paths = {
        "decode a row at a time": lambda: [tok.decode([t for t in r if t not in eos], skip_special_tokens=True)
                                           for r in rows],
        "completion_texts (decode_batch)": lambda: completion_texts(tok, rows, eos),
    }
    texts = {name: fn() for name, fn in paths.items()}  # warm-up
    ms: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            t = time.perf_counter()
            fn()
            ms[name].append((time.perf_counter() - t) * 1000)
    print(f"texts of {args.rows} rows x {args.tokens} tokens, ms a batch, {args.repeats} repeats alternating")
    print("| path | ms (mean +- 95%) | best |")
    print("|---|---|---|")
    for name, xs in ms.items():
        print(f"| {name} | {interval(xs)} | {min(xs):.2f} |")
    same = len(set(map(tuple, texts.values()))) == 1
    print(f"same texts: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
