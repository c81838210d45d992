"""Record a real model's answers to the LLM proposer's real prompt, for tests/test_evolve_llm.py.

The prompt is the one `backend/evolve/llm.py` sends in the first round of the
tests' synthetic run (`tests/synthetic_run.build_run(steps=6)`, default
RunConfig, proposer = llm): the script runs that round against a local
capturing endpoint and keeps the request exactly as the proposer made it
(messages, temperature, max_tokens). It then asks a real model that prompt
`--answers` times and writes every raw answer, with the model, the prompt's
hash, the sampling settings and the date, to a JSON fixture. The test replays
these answers through HTTP -> parse -> static check -> backtest -> gate and
fails (asking for a re-recording) once the prompt no longer hashes the same.

    .venv/bin/python benchmarks/record_llm_answers.py                 # embedded SmolLM2-135M, CPU
    .venv/bin/python benchmarks/record_llm_answers.py \\
        --base-url http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct   # vllm serve, llama.cpp ...

A 135M model mostly answers malformed JSON; that is real, and it is what the
test needs to show those answers become failed proposals with their reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
FIXTURE = ROOT / "tests" / "fixtures" / "llm_answers.json"
SETUP = "tests/synthetic_run.build_run(steps=6), default RunConfig with evolve.proposer = llm, first round"


def proposer_request(workdir: Path) -> dict:
    """The chat completions request body the LLM proposer sends in the synthetic run's first round."""
    from backend.evolve import run_round
    from chat_server import ChatServer, llm_config
    from synthetic_run import build_run, context, make_probe

    store = build_run(workdir / "run.db", steps=6)
    try:
        with ChatServer(lambda body: "") as srv:  # an empty answer: the round ends without backtests
            run_round(context(store, cfg=llm_config(srv.url), probe=make_probe()))
    finally:
        store.close()
    if len(srv.requests) != 1:
        raise SystemExit(f"expected one request from the proposer, got {len(srv.requests)}")
    return srv.requests[0]["body"]


EMBEDDED = "SmolLM2-135M-Instruct (embedded GGUF Q4_1, transformers on CPU)"


def ask_embedded(messages: list[dict], n: int, temperature: float, max_new_tokens: int) -> Iterator[dict]:
    """`n` sampled answers of the embedded SmolLM2-135M-Instruct (transformers, CPU), one at a time."""
    import torch

    from backend.config import ModelConfig
    from backend.policy.model import chat_ids, load_base

    model, tok, device, _ = load_base(ModelConfig(device="cpu"))
    ids = torch.tensor([chat_ids(tok, messages)], device=device)
    limit = getattr(model.config, "max_position_embeddings", None)
    print(f"prompt: {ids.shape[1]} tokens (model context {limit})", file=sys.stderr)
    for seed in range(n):
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                                 top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        new = gen[0, ids.shape[1]:]
        finish = "stop" if len(new) < max_new_tokens or new[-1].item() == tok.eos_token_id else "length"
        text = tok.decode(new, skip_special_tokens=True)
        print(f"answer {seed}: {len(new)} tokens in {time.perf_counter() - t0:.1f}s ({finish})", file=sys.stderr)
        yield {"seed": seed, "finish_reason": finish, "content": text}


def ask_endpoint(base_url: str, model: str, messages: list[dict], n: int, temperature: float,
                 max_tokens: int) -> Iterator[dict]:
    """`n` answers from an OpenAI-compatible server (vllm serve, llama.cpp's server, ...)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY", max_retries=0)
    for seed in range(n):
        resp = client.chat.completions.create(model=model, messages=messages, temperature=temperature,
                                              max_tokens=max_tokens, seed=seed)
        choice = resp.choices[0]
        yield {"seed": seed, "finish_reason": choice.finish_reason, "content": choice.message.content or ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="", help="an OpenAI-compatible endpoint; empty: the embedded model")
    ap.add_argument("--model", default="", help="the served model's name (with --base-url)")
    ap.add_argument("--answers", type=int, default=4, help="how many answers to record (default 4)")
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="longest answer; 0: the proposer's own max_tokens, capped at 300 for the embedded model")
    ap.add_argument("--out", type=Path, default=FIXTURE, help=f"fixture to write (default {FIXTURE.relative_to(ROOT)})")
    a = ap.parse_args(argv)
    if a.base_url and not a.model:
        ap.error("--base-url needs --model (the name the server serves)")
    if a.answers < 1:
        ap.error("--answers must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        req = proposer_request(Path(tmp))
    from chat_server import prompt_hash

    messages, temperature = req["messages"], req["temperature"]
    max_tokens = a.max_tokens or (req["max_tokens"] if a.base_url else min(300, req["max_tokens"]))
    if a.base_url:
        model, answers = f"{a.model} at {a.base_url}", ask_endpoint(a.base_url, a.model, messages, a.answers,
                                                                    temperature, max_tokens)
    else:
        model, answers = EMBEDDED, ask_embedded(messages, a.answers, temperature, max_tokens)
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    fixture = {"model": model, "recorded_at": when,
               "setup": SETUP, "prompt_hash": prompt_hash(messages),
               "sampling": {"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens},
               "recorded_with": "benchmarks/record_llm_answers.py", "answers": []}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for answer in answers:  # written after each answer: a slow model interrupted keeps what it said
            fixture["answers"].append(answer)
            tmp = a.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
            tmp.replace(a.out)
    except Exception as e:  # an unreachable server, a model that will not load: one line, not a traceback
        print(f"record_llm_answers: no answer from {model}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        return 1
    print(f"{len(fixture['answers'])} answers of {model} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
