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
- gpu: the runs on record in issue 15 (an H200, SmolLM2-135M, default math
  suite, 120 steps, 64 tasks x 8 rollouts a step, held-out 500 problems):
  - `train.lr = 1e-4`: the learning-rate sweep on record, expert harness
    static, seed 0: lr 2e-5 (the default) 0.114 -> 0.204 held-out (barely
    learns); 1e-4 0.114 -> 0.978 (seeds 1 and 2: 0.976, 0.978 by step 80);
    5e-4 0.114 -> 0.280 (worse).
  - `train.tasks_per_step = 64`, `train.group_size = 8`: the scale those runs
    used; 512 rollouts a step, one 120-step run in about 2-5 minutes
    (docs: /shared GPU.md, "four 120-step runs ... side by side in about 9 min").
  - `train.max_new_tokens_cap = 256`: the issue's GPU profile ("up to 256 new
    tokens"); decode at batch 512 x 256 is what `python -m backend.bench`
    measures (fast engine about 200k tok/s on an H200).
  - `eval.n_val = 200`, `eval.n_test = 500`: the issue's held-out sizes (test
    500 as in the runs above; validation 200 for the gate's watch).
  - `eval.every = 20`: six or seven points on a 120-step curve, enough for the
    report's area under the test-accuracy curve without evaluation dominating
    a step.
  - `evolve.replay_max_rows = 8192`: replay reads as many stored rollouts as the
    power calculation asks for (`stats.replay_rows`: about 17,000 at 4% accuracy
    and 8 rollouts a group, 4,800 at 50%), at most sixteen steps of 512. The
    600-row window of the CPU default left lenient extraction `underpowered` at
    4% accuracy on 4 x H100 (README, Results); replaying 8,192 rows costs about
    0.7 s a harness in the worker (bench row `harness`: 44 ms per 512).
  - `model.gen_batch = 512`: a whole step's rollouts decoded at once, fixed. Left
    to free memory (the fast engine's own choice), runs sharing a card decoded in
    different batch shapes and drew different samples: on 4 x H100 two runs that
    trained identically in principle (coevolve-expert, no training-relevant
    promotion, and static-expert) ended 0.009 apart on the default suite.
  - `evolve.trials = "off"`: in the evidence runs of sessions 4-6 (2-step trials,
    one a round, paired over 200 validation problems) every trial ended
    `inconclusive`: 133 and 132 on the two suites in session 4, 77 in session 6.
    They were most of the search's cost: in session 6 the search spent 90-111%
    of a run's training rollouts, of which probes were 3,134 and replay about
    10,000 a run, and trials the rest (about 40,000). A trial of a few steps cannot
    see the gain of a curriculum or token-budget change (docs/gate.md: about 0.12
    detectable with 200 problems). With trials off such changes stay
    `inconclusive` for an operator, and an auto-promoting run does not propose them
    (`schedule.judgeable_by_trial`). `--set evolve.trials=on` brings them back;
    `--set evolve.trials=spent` trials them only in rounds with nothing else to try.
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
        "eval.every": 20,
        "evolve.replay_max_rows": 8192,
        "model.gen_batch": 512,
        "evolve.trials": "off",
    },
}
CHOICES = ("auto", *PROFILES)
HARNESSES: dict[str, dict[str, str]] = {"cpu": {"math": "math_cpu"}}
"""A profile's starting harness for a one-domain run that names none: a file under
backend/harness/defaults/. Other domains start from their default harness."""


def resolve(name: str) -> str:
    """`cpu` or `gpu`; `auto` asks torch whether CUDA is there (imported only then).

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
