"""A training pass that computes each prompt its rows share once (`train.shared_prefix`).

A GRPO group is G rollouts of one prompt, and a full pass (`grpo.token_logprobs`) runs every
row's prompt and completion through the model: the prompt G times. For long prompts and short
completions (one-shot SWE: a median of 334 prompt tokens at level 0 and 875 at level 1 with
the embedded tokenizer, <= 192 completion tokens) that is most of the step's compute. Here a pass runs in two parts:

1. the pass's distinct prompts, less their last token, once each: (k, L) right-padded, their
   keys and values kept in a cache with their autograd graph (not detached, so the completion
   tokens' gradient reaches the LoRA weights through the prompt's keys and values too);
2. every row's last prompt token and its completion, (B, 1 + C) right-padded, attending to its
   prompt's cached keys and values at positions that continue the prompt's. The cache is spread
   to the rows by `expand` (one prompt in the pass) or an index gather (several); the backward of
   either sums the rows' gradients into their prompt's keys and values.

Part 2's hidden states predict the completion tokens. Their log-probs are laid out as the full
pass's (B, T - 1) over the collated rows, zero at prompt positions (the loss mask drops them),
so the loss code is the same on both paths, and so are the values, to float rounding
(tests/test_shared_prefix.py). A pass whose rows share no prompt, or a model whose body keeps
no cache in training (gradient checkpointing drops it), runs the full pass: `applies` decides.

Checking this path against the full pass: compare LoRA gradients, not losses. A one-epoch step
without KL takes its old log-probs from the same pass (ratio 1), so its loss is -sum(A * mask) /
denom whatever the log-probs are: bit-identical on any path, right or wrong. In bf16 both paths
round, and differently, so compare each with the full pass in fp32 on the same weights
(tests/test_shared_prefix.py: a shared pass that lost the gradient through the prompt's keys and
values errs by about 70% there, the bf16 full pass by about 1%); `evotui bench --only trainer`
logs the difference per kind of LoRA module and its worst modules.

    >>> from backend.policy.grpo import Sample
    >>> computed_tokens([Sample([1, 2, 3], [4, 5], [1, 1], 0.5), Sample([1, 2, 3], [6], [1], -0.5)])
    8
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from backend.policy import lmhead


def applies(model, rows) -> bool:
    """Whether the shared pass runs for `rows` (`grpo.Sample`s): some rows share a prompt, every
    prompt has at least two tokens (one cached, one leading the completion), and the model's body
    takes a cache it keeps while training."""
    if len(_distinct(rows)[0]) == len(rows) or any(len(s.prompt_ids) < 2 for s in rows):
        return False
    return _cache_arg(lmhead.backbone_and_head(model)[0]) is not None


def token_logprobs(model, rows, width: int, chunk: int = 64, want_entropy: bool = False):
    """Log-prob of each next token of `rows` collated to `width` tokens: (B, width - 1), plus entropy,
    as `grpo.token_logprobs` gives them at completion positions, zero at prompt positions."""
    body, head = lmhead.backbone_and_head(model)
    device = head.weight.device
    prompts, owner = _distinct(rows)
    prefix_ids, prefix_att = _right_padded([p[:-1] for p in prompts], device)  # (k, L)
    arg = _cache_arg(body)
    cache = _new_cache(body)
    body(input_ids=prefix_ids, attention_mask=prefix_att, position_ids=_positions([0], prefix_ids.shape[1], device),
         use_cache=True, **{arg: cache})
    idx = lmhead.to_device(torch.tensor(owner), device)  # (B,) each row's prompt
    _spread(cache, idx, len(prompts))
    tail_ids, tail_att = _right_padded([s.prompt_ids[-1:] + s.completion_ids for s in rows], device)  # (B, 1 + C)
    att = torch.cat([prefix_att.index_select(0, idx), tail_att], 1)  # (B, L + 1 + C)
    pos = _positions([len(s.prompt_ids) - 1 for s in rows], tail_ids.shape[1], device)
    hidden = body(input_ids=tail_ids, attention_mask=att, position_ids=pos, use_cache=True,
                  **{arg: cache}).last_hidden_state
    lp, ent = lmhead.head_logprobs(head, hidden[:, :-1], tail_ids[:, 1:], chunk, want_entropy)  # (B, C)
    return _placed(lp, rows, width), _placed(ent, rows, width)


def computed_tokens(rows) -> int:
    """Tokens the shared pass computes for `rows`, padding included: the distinct prompts less
    their last token, padded to the longest, and each row's last prompt token and completion,
    padded to the longest (against a full pass's rows x longest row)."""
    prompts, _ = _distinct(rows)
    return (len(prompts) * max(len(p) - 1 for p in prompts)
            + len(rows) * (1 + max(len(s.completion_ids) for s in rows)))


def _distinct(rows) -> tuple[list[list[int]], list[int]]:
    """The rows' distinct prompts in order of first use, and each row's index into them."""
    seen: dict[tuple[int, ...], int] = {}
    owner = [seen.setdefault(tuple(s.prompt_ids), len(seen)) for s in rows]
    return [list(p) for p in seen], owner


def _right_padded(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) ids padded with 0 after each sequence (the mask hides it), and that mask, on `device`."""
    ids, att = lmhead.pad_right(seqs, 0)
    return lmhead.to_device(ids, device), lmhead.to_device(att, device)


def _positions(starts: list[int], length: int, device) -> torch.Tensor:
    """(N, length) position ids counting on from each row's start (padding keeps counting)."""
    pos = torch.tensor(starts)[:, None] + torch.arange(length)[None]
    return lmhead.to_device(pos, device)


def _cache_arg(body) -> str | None:
    """The keyword the body takes its cache by (`cache`, formerly `past_key_values`), or None when it
    takes none or would drop it: gradient checkpointing runs its layers without a cache."""
    if any(getattr(m, "gradient_checkpointing", False) for m in body.modules()):
        return None
    params = inspect.signature(body.forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def _new_cache(body):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=body.config)
    except TypeError:  # older transformers: no config argument
        return DynamicCache()


def _spread(cache, idx: torch.Tensor, prompts: int) -> None:
    """Each layer's cached (k, heads, L, D) keys and values, one per prompt, made (B, heads, L, D),
    one per row: a view (`expand`) for one prompt, else a gather. Either keeps the graph."""
    for layer in cache.layers:
        if prompts == 1:
            layer.keys = layer.keys.expand(len(idx), *layer.keys.shape[1:])
            layer.values = layer.values.expand(len(idx), *layer.values.shape[1:])
        else:
            layer.keys = layer.keys.index_select(0, idx)
            layer.values = layer.values.index_select(0, idx)


def _placed(x: torch.Tensor, rows, width: int) -> torch.Tensor:
    """(B, C) values of the completion tokens placed where the full pass has them in its (B, width - 1)
    targets: completion token j of a row with a prompt of p tokens at p - 1 + j, zero elsewhere."""
    out = []
    for i, s in enumerate(rows):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        out.append(F.pad(x[i, :c], (p - 1, width - p - c)))
    return torch.stack(out)
