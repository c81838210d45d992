"""A run's arithmetic is a function of its config, its seed and the code, whatever shares the card.

Every paired claim of the project (an evolving run against its static twin of the same
seed) assumes two runs of one config train identically until a change that alters training
is promoted. What could make the arithmetic depend on anything else, and what is done:

- Batch shapes read from memory: every plan reads the run's share of the card, or the card's
  total size, less what this process holds (`memory.card_bytes`, `memory.plan_budget`,
  `memory.generation_batch`), never the card's free memory (`torch.cuda.mem_get_info`), which
  moves with the neighbours. The training budget is fixed at the run's first step.
- Kernels that add in a racy order: the trainer's passes run under
  `torch.use_deterministic_algorithms(True)` (`training`). On CUDA the memory-efficient SDPA
  kernel that transformers uses for padded batches then computes its backward without
  splitting the keys over blocks (`num_splits_key = 1`; split, the blocks' partial gradients
  are added with atomics, in an order the scheduler picks, and it picks differently when other
  processes share the SMs); gather, scatter_add and index_add use their deterministic kernels.
  It is on only around training: generation is our own kernels (fastgen, fastattn: no
  atomics, the sampler's reductions in a fixed order) or transformers `generate`, some of whose
  sampling ops (a float cumsum for top-p) have no deterministic CUDA kernel and would raise.
  `train.deterministic = false` turns it off (`evotui bench` row `determinism` measures what it
  costs); then twins are no longer guaranteed to match on a shared card.
- cuBLAS: `CUBLAS_WORKSPACE_CONFIG=:4096:8` (set before CUDA starts unless the user set it):
  with its default workspaces cuBLAS may reduce in a different order when a process uses
  several streams (the fast engine captures its graphs on a side stream), and
  deterministic mode refuses cuBLAS without it.
- Precision and autotuning: TF32 off for float32 matmuls (the adapters are float32),
  `cudnn.benchmark` off (it times kernels at first use) and `cudnn.deterministic` on. Nothing
  chooses a kernel or a tile by timing at run time: the Triton decode kernels have fixed
  tiles (`FastGenerator.attn_tile`; `evotui bench` times other tiles, a run never does), no
  `triton.autotune`, and torch.compile is off in runs (a benchmark option only; deterministic
  mode also keeps Inductor from autotuning).
- Random state: seeded per step (`Engine.seed_step`), per adapter init (`load_fast_policy`)
  and per weight merge (`FastGenerator.refresh`); a batch cut short by a pause is drawn again
  from the saved state. No random draw depends on a thread or a clock.

What stays load-dependent: vLLM (`model.engine=vllm`, first choice of `auto` on CUDA where it
is installed) schedules its batches as requests arrive and finish, so its samples can depend
on timing; the fast engine does not. An out-of-memory error when the card is physically full before a
run reaches its share (the loop halves the batch and logs it; shares that add up to at most
about 0.9 avoid it), and harness or sandbox time limits (a wall deadline hit under heavy CPU
load scores a rollout as an error).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"


def configure() -> None:
    """Process-wide settings for reproducible arithmetic (idempotent; call before CUDA starts)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Deterministic mode would otherwise fill every torch.empty with NaN first: nothing here reads
    # memory it did not write, and the fill costs a kernel per allocation.
    torch.utils.deterministic.fill_uninitialized_memory = False


@contextmanager
def training(on: bool = True):
    """Deterministic algorithms inside the block (the trainer's forward and backward passes).

    `warn_only` stays False: with it, the memory-efficient attention backward keeps splitting
    keys and only warns. The previous setting comes back after the block.
    """
    if not on:
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    configure()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def settings() -> dict:
    """What is set now (for `evotui doctor`, benchmarks and tests)."""
    return {"cublas_workspace": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
