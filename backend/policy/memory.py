"""Batch sizes from a memory estimate, never by trial and out-of-memory.

Training: bytes a sequence of T tokens costs in one LoRA forward/backward are

    T * layers * act_per_token_layer        saved activations
  + T * 6 * hidden                          embeddings, final norm, hidden kept per chunk
  + chunk * vocab * 14                      one chunk of logits (bf16, fp32, grad, softmax)

`act_per_token_layer` = 41*hidden + 10*intermediate + 4*kv_dim bytes for a
bf16 base with fp32 LoRA adapters on all seven projections. The
coefficients were fitted with saved-tensor hooks on Llama layers of three
shapes (tests/test_bench.py checks the fit on a small model); `evotui bench`
prints the estimate next to the measured peak on the GPU. The micro-batch is
the largest count of such sequences that fits in the run's budget, with a
margin. Budgets come from the config and the card's size (`card_bytes`: the
run's `model.gpu_share` of the card, else the whole card) less what this
process holds, never from the card's free memory, so a run's batch shapes, and
with them its arithmetic, do not depend on what else runs on the card. On the
CPU the budget is `CPU_TRAIN_BYTES` (`cpu_micro_batch`).

Generation: the fast engine needs the KV cache (T * 2 * layers * kv_dim *
2 bytes per sequence) plus a few vocabulary-sized rows for sampling.

    >>> spec = Spec(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152, eps=1e-5)
    >>> pick_micro_batch(spec, seq_len=384, free_bytes=40 << 30) > 32
    True
"""

from __future__ import annotations

import torch

from backend.policy.shape import Spec, unwrap

MARGIN = 0.85  # fraction of the budget we plan to use: allocator fragmentation, cuBLAS workspaces
RESERVE = 1 << 30  # bytes kept free besides the margin
MAX_TOKENS = 32768  # tokens per micro-batch beyond which throughput stopped growing (`train.pass_tokens`)


def act_bytes_per_token_layer(spec: Spec, dtype_bytes: int = 2) -> int:
    """Saved activations of one decoder layer for one token (LoRA on all projections)."""
    kv = spec.kv_heads * spec.head_dim
    base = 41 * spec.hidden + 10 * spec.inter + 4 * kv  # fitted for a bf16 base
    return int(base * (1 + (dtype_bytes - 2) / 2 * 0.6))  # fp32 base: most saved tensors double


def train_bytes_per_sequence(spec: Spec, seq_len: int, chunk: int = 64, dtype_bytes: int = 2) -> int:
    """Peak bytes one sequence adds to a LoRA training micro-batch (see the module docstring)."""
    acts = seq_len * spec.layers * act_bytes_per_token_layer(spec, dtype_bytes)
    outside = seq_len * 6 * spec.hidden * dtype_bytes
    logits = min(chunk, seq_len) * spec.vocab * 14
    return acts + outside + logits


def full_vocab_bytes_per_sequence(spec: Spec, seq_len: int, dtype_bytes: int = 2) -> int:
    """The same without chunking: the whole (T, V) logits live in bf16, fp32 and their grads."""
    return train_bytes_per_sequence(spec, seq_len, 0, dtype_bytes) + seq_len * spec.vocab * 14


def pick_micro_batch(spec: Spec, seq_len: int, free_bytes: int, chunk: int = 64, dtype_bytes: int = 2,
                     max_tokens: int = MAX_TOKENS) -> int:
    """The largest micro-batch whose estimated peak fits in `free_bytes` (at least 1).

    Past `max_tokens` tokens a micro-batch only costs memory: the GPU is busy
    already (64 x 384 tokens run faster than 247 x 384 on a large card).
    """
    per = train_bytes_per_sequence(spec, seq_len, chunk, dtype_bytes)
    budget = free_bytes * MARGIN - RESERVE
    return int(max(1, min(max_tokens // max(seq_len, 1), budget // per)))


def balance(n: int, micro: int) -> int:
    """Equal micro-batches: 256 rows at most 85 a pass -> 4 passes of 64, not 85 + 85 + 86."""
    micro = max(1, min(micro, n))
    passes = -(-n // micro)
    return -(-n // passes)


_SHARES: dict[int, float] = {}  # CUDA device index -> the fraction of it this process may hold


def _index(device) -> int:
    """The CUDA device index of `device` ("cuda" alone: the current device)."""
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


def _share_bytes(index: int) -> int:
    """Bytes of the card at `index` that this process's share allows."""
    return int(_SHARES[index] * torch.cuda.get_device_properties(index).total_memory)


def claim_share(device, share: float) -> None:
    """Limit this process to `share` of a CUDA device (`model.gpu_share`; 0 = no limit; not CUDA: nothing).

    With a share the caching allocator stops at it, so an out-of-memory error (and the smaller
    batch the loop retries with) follows from this process's allocations alone; without one it
    can also come from the other processes filling the card. Either way the planner reads
    `card_bytes`, never the card's free memory (docs/results/gpu-trajectory-split/).
    """
    if torch.device(device).type != "cuda" or not share:
        return
    index = _index(device)
    torch.cuda.set_per_process_memory_fraction(share, index)
    _SHARES[index] = share


def card_bytes(device) -> int:
    """The memory this process plans for on a CUDA device: its share (`claim_share`), else the
    card's total size. Both are fixed by the config and the card; the free memory
    (`torch.cuda.mem_get_info`) moves with whatever else runs on the card, and a plan read from
    it made two runs of one seed plan different batches and train on different arithmetic."""
    index = _index(device)
    if index in _SHARES:
        return _share_bytes(index)
    return int(torch.cuda.get_device_properties(index).total_memory)


def free_bytes(device) -> int:
    """`card_bytes` less what this process has allocated: what it may still plan for. Depends on
    this process alone (its config, seed and history), never on its neighbours."""
    return max(0, card_bytes(device) - torch.cuda.memory_allocated(_index(device)))


def share_bytes(device) -> int | None:
    """Bytes of a CUDA device that this process's share allows; None without a share (or off CUDA)."""
    if torch.device(device).type != "cuda":
        return None
    index = _index(device)
    return _share_bytes(index) if index in _SHARES else None


def plan_budget(device) -> int | None:
    """The memory a run's training micro-batches plan for (`GRPOTrainer.plan`): `card_bytes` less
    what this process holds when the trainer's first step starts; None off CUDA.

    Fixed at the first step (trained or not: held-out evaluation and the first step's generation
    come before it, the same in every run of a config) and saved with the checkpoints, because
    what the process holds later depends on its own history: an evolution round's probe leaves
    a KV cache of its own batch shape in the fast engine, and a resumed process holds the
    optimizer's state but no held-out evaluation caches yet. Read again at every step, those
    made an evolving run (or a resumed one) plan other micro-batches than its static twin of the
    same seed. `pick_micro_batch`'s margin covers what the process allocates later."""
    if torch.device(device).type != "cuda":
        return None
    return free_bytes(device)


def auto_micro_batch(model, samples, device, chunk: int = 64, fallback: int = 8, budget: int | None = None,
                     max_tokens: int = MAX_TOKENS) -> int:
    """Micro-batch for a GRPO step over `samples` (prompt + completion lengths); `fallback` off CUDA.
    `budget`: the bytes to plan for (`plan_budget`), else the device's `free_bytes` now;
    `max_tokens`: the most tokens a pass holds (`train.pass_tokens`)."""
    device = torch.device(device)
    if device.type != "cuda" or not samples:
        return fallback
    cfg = unwrap(model).config
    spec = Spec.of(cfg)
    T = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    dtype_bytes = unwrap(model).get_input_embeddings().weight.element_size()
    room = free_bytes(device) if budget is None else budget
    return balance(len(samples), pick_micro_batch(spec, T, room, chunk, dtype_bytes, max_tokens))


CPU_TRAIN_BYTES = 3 << 30
"""Bytes a CPU training pass may plan for (saved activations and one logits chunk, float32).
A fixed figure, not the machine's free memory: the same run plans the same passes on any
host. On the CPU the micro-batch was a fixed 8 rows, and eight 700-token code sequences
held about 10 GB in one backward pass."""
CPU_FACTOR = 2.5
"""Measured peak over `train_bytes_per_sequence` on the CPU (float32 base, torch's CPU kernels and
allocator), benchmarks/cpu_step_memory.py --tasks 1 (8 code rows of 356 tokens, SmolLM2-135M):
2 rows a pass peaked at 3.84 GiB, 1 row at 2.15 GiB, 0.41 GiB after loading: about 1.7 GiB a
row against an estimate of 0.68 GB."""


def cpu_micro_batch(model, samples, ceiling: int, chunk: int = 64, budget: int = CPU_TRAIN_BYTES) -> int:
    """Rows per pass on the CPU: `ceiling` (`train.micro_batch`) where the longest sequence of
    `samples` lets that many fit in `budget`, else as many as fit (at least 1), in equal passes
    (`balance`). SmolLM2-135M in float32: 1 row a pass from about 200 tokens on (code rollouts and
    most math ones), all 8 for short ones. A single row longer than the budget still trains, alone."""
    if not samples:
        return ceiling
    T = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    fit = cpu_rows(model, T, ceiling, chunk, budget)
    return ceiling if fit >= ceiling else balance(len(samples), fit)


def cpu_rows(model, seq_len: int, ceiling: int, chunk: int = 64, budget: int = CPU_TRAIN_BYTES) -> int:
    """Rows of `seq_len` tokens that one CPU pass may hold: `ceiling` at most, at least 1."""
    base = unwrap(model)
    per = CPU_FACTOR * train_bytes_per_sequence(Spec.of(base.config), seq_len, chunk,
                                                base.get_input_embeddings().weight.element_size())
    return max(1, min(ceiling, int(budget // max(per, 1))))


def rows_at_length(model, device, ceiling: int, chunk: int = 64, budget: int | None = None,
                   auto: bool = True, max_tokens: int = MAX_TOKENS):
    """`rows(T)`: the most rows whose longest has T tokens that one training pass may hold, for
    passes planned by length (`buckets.by_length`). On CUDA with `auto` the memory plan at that
    length (`pick_micro_batch` within `budget`, `ceiling` at most: the cap after an out-of-memory
    error, or None); on the CPU with `auto` `cpu_rows`; else `ceiling` whatever the length.
    The same estimate as `auto_micro_batch`, read at each pass's own length instead of the step's
    longest, so a pass of short rows holds more of them."""
    if not auto:
        return lambda T: max(1, int(ceiling))
    if torch.device(device).type != "cuda":
        return lambda T: cpu_rows(model, T, ceiling, chunk)
    base = unwrap(model)
    spec, dtype_bytes = Spec.of(base.config), base.get_input_embeddings().weight.element_size()
    room = free_bytes(device) if budget is None else budget

    def rows(T: int) -> int:
        n = pick_micro_batch(spec, T, room, chunk, dtype_bytes, max_tokens)
        return min(n, ceiling) if ceiling else n
    return rows


GEN_FRACTION = 0.4
"""Share of `card_bytes` the fast engine's automatic batch may fill with KV cache and sampling rows."""


def generation_batch(spec: Spec, total_len: int, device, fraction: float = GEN_FRACTION, cap: int = 512,
                     int8: bool = False) -> int:
    """Rows the fast engine decodes at once when `model.gen_batch` is 0: KV cache and sampling rows
    within `fraction` of `card_bytes`. From the card's size (or the run's share), not from what is
    free or allocated now, so a run decodes in the same batch shapes (and draws the same samples)
    whatever shares its card and whatever its own rounds left behind. `int8`: the cache is int8."""
    per = total_len * spec.kv_bytes_per_token(int8=int8) + spec.vocab * 4 * 8
    n = int(card_bytes(device) * fraction // per)
    return max(8, min(cap, n // 8 * 8))
