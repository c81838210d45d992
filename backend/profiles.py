"""Run profiles: the defaults scaled to the machine (`--profile cpu|gpu|auto`).

A profile fills config values the run did not set: a value from the config
file or from `--set` always wins (`config.load_config` applies the profile
last, only to keys still missing). `auto` is `gpu` when
`torch.cuda.is_available()`, else `cpu`. The resolved name is stored in the
run's config (`profile`), so a report knows which defaults a run had.

    >>> PROFILES["gpu"]["train.lr"]
    0.0001
    >>> resolve("cpu")
    'cpu'

Where the numbers come from:

- cpu: sized so that `make run` (8 steps) shows the method within about five minutes
  on a 2-core machine (docs/results/cpu-first-run/): a diagnosed failure, a change
  backtested and promoted, groups that come alive because the evaluator's verdicts
  within them differ, and updates taken. At the old size (4 x 4 rollouts, 128 tokens,
  the default harness) all 80 groups of a 20-step run were dead and no update was
  taken: the model answered correctly 3 times in 320 rollouts.
  - the starting harness (`HARNESSES`, math only): `harness/defaults/math_cpu.py`, the
    default recipe (tag-only correctness, format term) at curriculum level 0, a
    short-answer prompt, temperature 0.7 and 48 tokens; on training tasks the base
    model is then right about 8% of the time (1% with the default harness's settings).
  - `train.group_size = 8`: at about 8% accuracy a group of 8 holds both verdicts
    about half the time (1 - 0.92^8), a group of 4 a third; 4 tasks a step kept.
  - `train.max_new_tokens_cap = 64`, `eval.max_new_tokens = 48`: the harness asks for
    48; the cap leaves the token-budget knob one step up.
  - `eval.n_val = eval.n_test = 16`, `eval.every = 8`: held-out sets at the start
    and the end of an 8-step run; a held-out pass costs about a training step.
  - `evolve.every = evolve.window = 2`: the first round at step 2 (8 groups of 8),
    so the steps after its promotion train on what it changed.
  - `evolve.candidates = 3`, `evolve.probe_tasks = 1`: a probe (prompt, sampling)
    generates a step's worth of rollouts a side on the CPU; replayed changes are cheap.
  - `train.lr = 2e-5` kept: the CPU sweep on record (docs/results/cpu-lr-sweep,
    commit a77a594), expert harness static, seed 0, 10 steps, validation 32:
    2e-5 3 -> 4 of 32; 1e-4 3 -> 3 (paired with 2e-5: -0.031 [-0.140, +0.062]);
    3e-4 3 -> 5 (+0.031 [-0.091, +0.160]). No interval excludes 0: at this size
    38 of 40 groups are dead, so each run took 2 updates in 10 steps, and the
    default-harness `make run` none in 20. Dead groups limit learning here, not
    the step size.
- gpu: one GPU, SmolLM2-135M on the default math suite, a 120-step run in a few minutes
  (the measurements behind each value: docs/results/README.md):
  - `train.lr = 1e-4`: in the learning-rate sweep (expert harness, static) 2e-5 barely
    learns and 5e-4 learns less than 1e-4.
  - `train.tasks_per_step = 64`, `train.group_size = 8`: 512 rollouts a step, what one
    decode batch holds.
  - `train.max_new_tokens_cap = 256`: room for the token-budget knob above the harness's
    own budget; decode at batch 512 x 256 is what `evotui bench` measures.
  - `eval.n_val = 200`, `eval.n_test = 500`: validation for the gate, test reported
    only, each large enough for a paired interval of a few points.
  - `eval.n_ood = 164`: code on generated tasks is also tested on all of HumanEval, reported
    beside test as out-of-distribution (other domains have no such set).
  - `eval.every = 20`: six or seven points on a 120-step curve, enough for the area
    under the test-accuracy curve without evaluation dominating a step.
  - `evolve.replay_max_rows = 8192`: replay reads as many stored rollouts as the power
    calculation asks for (`stats.replay_rows`: about 17,000 at 4% accuracy, 4,800 at
    50%), at most sixteen steps of 512; a few hundred rows leave a change at low
    accuracy underpowered. Replaying 8,192 rows costs under a second a harness.
  - `model.gen_batch = 512`: a step's rollouts decoded in one fixed batch shape. Left
    to free memory, runs sharing a card decode in different shapes and draw different
    samples, so twins that should train identically drift apart.
  - `evolve.trials = "off"`: a trial of a few steps, paired over 200 validation
    problems, detects only gains of about 0.12 (docs/gate.md); trials of that size
    ended inconclusive and cost more rollouts than training itself. With trials off,
    changes that only a trial can judge (curriculum, token budget) stay `inconclusive`
    for an operator, and an auto-promoting run does not propose them
    (`schedule.judgeable_by_trial`); the population of runs judges them by training
    (`evotui run --population N`). `--set evolve.trials=on` brings trials back;
    `--set evolve.trials=spent` trials them only in rounds with nothing else to try.
- gpu-fast: gpu with the speed settings measured together (docs/gpus.md), never chosen by
  `auto`. On an H100 (docs/results/gpu-speed-h100-s22/), the math step at 512 rollouts took
  1.43 +- 0.12 s against today's 2.16 +- 0.22 s, and six runs a card 1.96x [1.69, 2.28] the
  rollouts/s over steps 2-30 (on an H200, docs/results/gpu-speed-h200-s21/: 1.54 +- 0.11 s
  against 2.39 +- 0.79 s):
  - `train.length_buckets`, `train.causal_only`: passes of rows of like length, attention
    without the padding mask;
  - `train.lora_base_dtype`: LoRA's matmuls in the base model's dtype;
  - `train.pass_tokens = 65536`: fewer, larger training passes where memory allows;
  - `train.checkpoint_overlap`: the checkpoint written while the next step generates.
  Each changes a run's arithmetic, so a gpu-fast run and a gpu run of one seed are different
  runs; twins within gpu-fast stay identical (checked under MPS with all five, six runs on
  an H100). `train.compile` is left out: its first step compiles for about a minute.
"""

from __future__ import annotations

import os
from pathlib import Path

PROFILES: dict[str, dict[str, object]] = {
    "cpu": {
        "train.group_size": 8,
        "train.max_new_tokens_cap": 64,
        "eval.n_val": 16,
        "eval.n_test": 16,
        "eval.max_new_tokens": 48,
        "eval.every": 8,
        "evolve.every": 2,
        "evolve.window": 2,
        "evolve.candidates": 3,
        "evolve.probe_tasks": 1,
    },
    "gpu": {
        "train.tasks_per_step": 64,
        "train.group_size": 8,
        "train.lr": 1e-4,
        "train.max_new_tokens_cap": 256,
        "eval.n_val": 200,
        "eval.n_test": 500,
        "eval.n_ood": 164,
        "eval.every": 20,
        "evolve.replay_max_rows": 8192,
        "model.gen_batch": 512,
        "evolve.trials": "off",
    },
}
PROFILES["gpu-fast"] = {
    **PROFILES["gpu"],
    "train.length_buckets": True,
    "train.causal_only": True,
    "train.lora_base_dtype": True,
    "train.pass_tokens": 65536,
    "train.checkpoint_overlap": True,
}
CHOICES = ("auto", *PROFILES)
HARNESSES: dict[str, dict[str, str]] = {"cpu": {"math": "math_cpu"}}
"""A profile's starting harness for a one-domain run that names none: a file under
backend/harness/defaults/. Other domains start from their default harness."""


def resolve(name: str) -> str:
    """A profile's name as given, or for `auto`, `cpu` or `gpu` by whether torch sees CUDA
    (imported only then).

    EVOTUI_PROFILE_AUTO=cpu|gpu answers `auto` without torch (tests, dry runs)."""
    if name != "auto":
        return name
    forced = os.environ.get("EVOTUI_PROFILE_AUTO")
    if forced in PROFILES:
        return forced
    try:
        import torch
    except ImportError:
        return "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


def fill(data: dict, profile: str) -> dict:
    """Set the profile's values on a nested config dict where the dict has none (in place)."""
    for key, value in PROFILES[profile].items():
        *parents, leaf = key.split(".")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node.setdefault(leaf, value)
    harness = starting_harness(profile, str(data.get("domain", "math")))
    if harness is not None:
        data.setdefault("harness", str(harness))
    return data


def starting_harness(profile: str, domain: str) -> Path | None:
    """The profile's starting harness file for `domain` (a one-domain run), or None.

    >>> starting_harness("cpu", "math").name, starting_harness("gpu", "math")
    ('math_cpu.py', None)
    """
    name = HARNESSES.get(profile, {}).get(domain.strip())
    return Path(__file__).parent / "harness" / "defaults" / f"{name}.py" if name else None


def describe(profile: str) -> str:
    """One line for the start of a run: `profile: gpu (train.tasks_per_step=64, ...)`."""
    vals = ", ".join(f"{k}={v}" for k, v in PROFILES[profile].items())
    starts = ", ".join(f"{d}: {n}.py" for d, n in HARNESSES.get(profile, {}).items())
    vals += f"; starting harness {starts}" if starts else ""
    return f"profile: {profile} ({vals or 'the RunConfig defaults'}; config file and --set values win)"
