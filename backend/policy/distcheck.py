"""Does a generation engine sample the policy's own distribution?

GRPO's ratio and its KL term assume the rollouts came from the policy being
trained. An engine with its own kernels (the fast engine, vLLM) can drift from
it: a wrong mask, a lost LoRA delta, a rounding that moves the distribution.
Greedy agreement only checks the argmax; these checks bound the whole
next-token distribution:

- `teacher_forced`: feed the same sequences (prompt + continuation) through
  the engine and through the policy's HF forward, and compare the two
  log-softmaxes position by position: the largest |log p| difference on the
  fed tokens, and KL(policy || engine) over the vocabulary (mean and max over
  positions). The engine side comes from `engine.teacher_forced_logprobs`.
- `chi_square`: sampled token frequencies against the policy's probabilities
  (for samplers: an engine whose logits are right can still sample wrong).

    >>> a = teacher_forced(policy, engine, prompts, continuations)
    >>> a.kl_max < 1e-6 and a.max_abs_token < 1e-4   # fp32 on the CPU
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Agreement:
    """How far an engine's next-token distributions are from the policy's, over `positions`."""

    positions: int
    max_abs_token: float
    """max |log p_engine(x_t) - log p_policy(x_t)| over the fed tokens x_t (what the trainer's ratio sees)"""
    kl_mean: float
    """KL(policy || engine) per position, in nats: mean over positions"""
    kl_max: float
    """... and the largest"""

    def line(self) -> str:
        return (f"max |dlogp| {self.max_abs_token:.2e}, KL/pos mean {self.kl_mean:.2e} max {self.kl_max:.2e} "
                f"nats over {self.positions} positions")


@torch.no_grad()
def policy_logprobs(model, prompts: list[list[int]], continuations: list[list[int]], device) -> torch.Tensor:
    """(n, T, V) float32 log-softmax of the policy's HF forward along prompt + continuation.

    One row at a time, unpadded: the reference has no masking of its own to get wrong.
    """
    rows = []
    for p, c in zip(prompts, continuations):
        ids = torch.tensor([p + c[:-1]], dtype=torch.long, device=device)  # the last token predicts nothing
        logits = model(input_ids=ids).logits[0, len(p) - 1:]  # (T, V)
        rows.append(logits.float().log_softmax(-1))
    return torch.stack(rows)


def compare(ref: torch.Tensor, got: torch.Tensor, continuations: list[list[int]]) -> Agreement:
    """Agreement of `got` with `ref`, both (n, T, V) log-softmaxes over the same fed tokens."""
    if ref.shape != got.shape:
        raise ValueError(f"log-prob shapes differ: policy {tuple(ref.shape)}, engine {tuple(got.shape)}")
    got = got.to(ref.device)
    fed = torch.tensor(continuations, dtype=torch.long, device=ref.device)[..., None]  # (n, T, 1)
    d_tok = (ref.gather(-1, fed) - got.gather(-1, fed)).abs()
    # KL in float64 after renormalising: a float32 log-softmax is off by a constant of ~1e-7
    # per position, which would otherwise read as KL of that size.
    ref, got = ref.double().log_softmax(-1), got.double().log_softmax(-1)
    # Terms where the policy puts no mass are 0 (0 * log 0); -inf on the engine side alone is a real inf.
    p = ref.exp()
    kl = torch.where(p > 0, p * (ref - got), torch.zeros_like(p)).sum(-1).clamp(min=0)  # (n, T)
    return Agreement(positions=kl.numel(), max_abs_token=float(d_tok.max()), kl_mean=float(kl.mean()),
                     kl_max=float(kl.max()))


def teacher_forced(model, engine, prompts: list[list[int]], continuations: list[list[int]],
                   device=None, rows_per_chunk: int = 8) -> Agreement:
    """The engine's teacher-forced distributions against the policy's forward.

    Rows go in chunks so only (chunk, T, V) log-probs exist at a time on each side.
    """
    device = device if device is not None else next(model.parameters()).device
    parts = []
    for i in range(0, len(prompts), rows_per_chunk):
        p, c = prompts[i:i + rows_per_chunk], continuations[i:i + rows_per_chunk]
        parts.append(compare(policy_logprobs(model, p, c, device), engine.teacher_forced_logprobs(p, c), c))
    return merge(parts)


def merge(parts: list[Agreement]) -> Agreement:
    """One Agreement over all positions of several."""
    n = sum(a.positions for a in parts)
    return Agreement(positions=n, max_abs_token=max(a.max_abs_token for a in parts),
                     kl_mean=sum(a.kl_mean * a.positions for a in parts) / n,
                     kl_max=max(a.kl_max for a in parts))


def chi_square(counts: dict[int, int], probs: torch.Tensor, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square test of sampled token counts against the policy's probabilities.

    `probs` (V,) sums to 1. Tokens expected fewer than `min_expected` times are pooled into one
    cell (the test's approximation needs about 5 per cell). Returns (statistic, degrees of
    freedom, p-value): under the null (the engine samples `probs`), p < alpha happens with
    probability alpha, so alpha is the test's false-alarm rate.
    """
    total = sum(counts.values())
    if total == 0:
        raise ValueError("no samples")
    probs = probs.double().cpu()
    observed = torch.zeros_like(probs)
    for tok, k in counts.items():
        observed[tok] += k
    expected = probs * total
    big = expected >= min_expected
    obs = torch.cat([observed[big], observed[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    if exp[-1] < min_expected:  # the pooled rest is too small to be a cell: fold it into the largest
        top = int(exp[:-1].argmax())
        obs[top] += obs[-1]
        exp[top] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(exp) - 1
    if df < 1:
        raise ValueError("all the mass is on one token: nothing to test")
    p_value = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                            torch.tensor(stat / 2, dtype=torch.float64)))
    return stat, df, p_value
