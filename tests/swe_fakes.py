"""Test doubles for multi-turn episodes: a toy chat tokenizer and a scripted policy.

The toy tokenizer is word-level (ids from a shared vocabulary), while the
scripted policy emits 3-character pieces for its text, so a test can tell
whether the env kept the sampled ids verbatim (it must) or re-tokenized them.
"""

from __future__ import annotations

import json
import re

from backend.types import Generation

IM_START, IM_END = 1, 2
_PIECES = re.compile(r"\w+|\s|[^\w\s]")


class ToyTokenizer:
    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.inverse: dict[int, str] = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}

    def _id(self, piece: str) -> int:
        if piece not in self.vocab:
            self.vocab[piece] = 1000 + len(self.vocab)
            self.inverse[self.vocab[piece]] = piece
        return self.vocab[piece]

    def encode(self, text: str) -> list[int]:
        return [self._id(p) for p in _PIECES.findall(text)]

    def encode_chunks(self, text: str) -> list[int]:
        """A different segmentation of the same text (3-character pieces)."""
        return [self._id(text[i:i + 3]) for i in range(0, len(text), 3)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.inverse[i] for i in ids)

    def chat_ids(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """A ChatML-shaped template."""
        ids: list[int] = []
        for m in messages:
            ids += [IM_START] + self.encode(m["role"] + "\n" + m["content"]) + [IM_END] + self.encode("\n")
        if add_generation_prompt:
            ids += [IM_START] + self.encode("assistant\n")
        return ids


def call(name: str, **args) -> str:
    return f"<tool>{json.dumps({'name': name, 'args': args})}</tool>"


class ScriptedPolicy:
    """`generate` that plays a fixed script per task, chosen by the prompt.

    scripts: {task_id: [message text per turn]}; prompts: {task_id: prompt ids}.
    After the script ends it keeps submitting. Records every context it saw."""

    def __init__(self, tok: ToyTokenizer, scripts: dict[str, list[str]], prompts: dict[str, list[int]],
                 eos: bool = True):
        self.tok, self.scripts, self.prompts, self.eos = tok, scripts, prompts, eos
        self.contexts: list[list[int]] = []
        self.calls: list[tuple[int, int, float, float]] = []

    def _task_of(self, ctx: list[int]) -> str:
        for tid, p in self.prompts.items():
            if ctx[: len(p)] == p:
                return tid
        raise AssertionError("context does not start with any known prompt")

    def __call__(self, contexts, max_new_tokens, temperature, top_p):
        self.calls.append((len(contexts), max_new_tokens, temperature, top_p))
        out = []
        for ctx in contexts:
            self.contexts.append(list(ctx))
            tid = self._task_of(ctx)
            turn = sum(1 for i in range(len(ctx) - 1) if ctx[i] == IM_START
                       and self.tok.inverse.get(ctx[i + 1]) == "assistant") - 1
            script = self.scripts[tid]
            text = script[turn] if turn < len(script) else call("submit")
            ids = self.tok.encode_chunks(text)
            finish = "stop"
            if len(ids) > max_new_tokens:
                ids, finish = ids[:max_new_tokens], "length"
                text = self.tok.decode(ids)
            elif self.eos:
                ids = ids + [IM_END]
            out.append(Generation(ids=ids, text=text, finish=finish))
        return out
