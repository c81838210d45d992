"""Generation engines behind one interface: token ids in, `Generation`s out.

`HFEngine` is plain transformers `generate` (works everywhere). Engines
return token ids so the trainer never re-tokenizes text.
"""

from __future__ import annotations

import torch

from backend.envs.base import Generation


class HFEngine:
    """Batched sampling with transformers `generate` (left padding)."""

    name = "hf"

    def __init__(self, model, tokenizer, device, batch_size: int = 64):
        self.model = model
        self.tok = tokenizer
        self.device = device
        self.batch_size = batch_size
        self.eos_ids = self._eos_ids()

    def _eos_ids(self) -> list[int]:
        ids = {self.tok.eos_token_id}
        gc = getattr(self.model, "generation_config", None)
        extra = getattr(gc, "eos_token_id", None) if gc is not None else None
        if isinstance(extra, int):
            ids.add(extra)
        elif isinstance(extra, (list, tuple)):
            ids.update(extra)
        return sorted(i for i in ids if i is not None)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0) -> list[Generation]:
        out: list[Generation] = []
        for i in range(0, len(prompts), self.batch_size):
            out.extend(self._batch(prompts[i:i + self.batch_size], max_new_tokens, temperature, top_p))
        return out

    def _batch(self, prompts, max_new_tokens, temperature, top_p) -> list[Generation]:
        pad = self.tok.pad_token_id
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for j, p in enumerate(prompts):  # left padding: every prompt ends at column `width`
            ids[j, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[j, width - len(p):] = 1
        greedy = temperature <= 0
        kw = dict(do_sample=not greedy, max_new_tokens=max_new_tokens, pad_token_id=pad,
                  eos_token_id=self.eos_ids)
        if not greedy:
            kw.update(temperature=temperature, top_p=top_p, top_k=0)
        seqs = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kw)
        new = seqs[:, width:].tolist()  # (B, <= max_new_tokens)
        gens = []
        for row in new:
            toks, finish = [], "length"
            for t in row:
                if t in self.eos_ids:
                    toks.append(t)  # keep EOS: the policy must learn to stop
                    finish = "stop"
                    break
                toks.append(t)
            text = self.tok.decode([t for t in toks if t not in self.eos_ids], skip_special_tokens=True)
            gens.append(Generation(ids=toks, text=text, finish=finish))
        return gens


def make_engine(kind: str, model, tokenizer, device, batch_size: int = 64):
    """Pick an engine. Only `hf` exists on every machine; others are fast paths."""
    if kind in ("auto", "hf"):
        return HFEngine(model, tokenizer, device, batch_size)
    raise ValueError(f"generation engine '{kind}' is not available on this machine")
