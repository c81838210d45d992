"""The LM head's half of a log-prob pass: the transformer body and head of a (peft-wrapped) causal LM,
and the log-prob of target tokens from the last hidden states, a chunk of positions at a time.

Shared by the full training pass (`grpo.token_logprobs`) and the shared-prompt pass
(`prefix.token_logprobs`), with the rows' way to the device: right-padded (`pad_right`)
and copied without waiting (`to_device`).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def backbone_and_head(model):
    """(transformer body, lm_head) of a peft-wrapped or plain causal LM."""
    m = model
    if hasattr(m, "get_base_model"):
        m = m.get_base_model()
    return m.model, m.lm_head


def _chunk_logprobs(head, h, targets, want_entropy: bool):
    logits = head(h).float()  # (B, c, V): one chunk only
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if want_entropy:
        p = torch.softmax(logits, dim=-1)
        ent = lse - (p * logits).sum(-1)
        return lp, ent
    return lp, torch.zeros_like(lp)


def head_logprobs(head, hidden, targets, chunk: int = 64, want_entropy: bool = False):
    """Log-prob of `targets` (B, T) from the last hidden states `hidden` (B, T, H) that predict them,
    plus entropy, `chunk` positions at a time through the LM `head`: as `token_logprobs` does, the
    frozen head's gradient formed in forward where there is a gradient, else checkpointed chunks."""
    if not torch.is_grad_enabled() or head.weight.requires_grad:
        return checkpointed_chunks(head, hidden, targets, chunk, want_entropy)
    outs = [_HeadLogprob.apply(hidden[:, s:s + chunk], head.weight, targets[:, s:s + chunk], want_entropy)
            for s in range(0, hidden.shape[1], chunk)]
    return torch.cat([o[0] for o in outs], 1), torch.cat([o[1] for o in outs], 1)


def checkpointed_chunks(head, hidden, targets, chunk: int, want_entropy: bool):
    lps, ents = [], []
    for s in range(0, hidden.shape[1], chunk):
        h, t = hidden[:, s:s + chunk], targets[:, s:s + chunk]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logprobs, head, h, t, want_entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(head, h, t, want_entropy)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps, 1), torch.cat(ents, 1)


class _HeadLogprob(torch.autograd.Function):
    """Log-prob of the target through a frozen LM head, with its gradient worked out in forward.

    d lp / d h = W[target] - sum_v softmax(h W^T)_v W_v: a (.., hidden) tensor, so
    forward keeps that instead of the (.., vocab) logits, and backward is one
    multiply. Two head matmuls per chunk, against three for a checkpointed
    chunk (forward, recompute, backward). The entropy (no gradient) comes from
    the same softmax at little cost.
    """

    @staticmethod
    def forward(ctx, h, weight, targets, want_entropy: bool):
        logits = (h @ weight.t()).float()  # (B, c, V): one chunk only
        lse = torch.logsumexp(logits, -1, keepdim=True)
        lp = logits.gather(-1, targets[..., None])[..., 0] - lse[..., 0]
        logp = logits.sub_(lse)  # in place: log-softmax
        ent = -(logp.exp() * logp).sum(-1) if want_entropy else torch.zeros_like(lp)
        p = logp.exp_().to(weight.dtype)  # softmax, in place again
        jac = weight[targets].float() - (p @ weight).float()  # (B, c, H)
        ctx.save_for_backward(jac)
        ctx.h_dtype = h.dtype
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, g, _g_ent):
        (jac,) = ctx.saved_tensors
        return (g[..., None] * jac).to(ctx.h_dtype), None, None, None


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """`t` on `device` without waiting for the device: a plain copy to CUDA from pageable memory
    waits for every kernel queued before it (the previous micro-batch's backward), a copy from
    pinned memory does not (the pinned block is kept until the copy is done)."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def padded_length(n: int, multiple: int) -> int:
    """`n` rounded up to a multiple of `multiple`: the length `pad_right` pads a longest row of n to."""
    return -(-n // multiple) * multiple


def pad_right(seqs: list[list[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) ids with `pad_id` after each sequence, and the mask of its real tokens (on the CPU);
    T is the longest sequence rounded up to a multiple of `multiple`."""
    T = padded_length(max(len(x) for x in seqs), multiple)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = torch.tensor(x)
        att[i, :len(x)] = 1
    return ids, att
