"""`evotui bench --only card`: rollouts per second of one card that several runs share.

Users pack runs on a card (a compare's `--jobs`, a population's members), so what a
card turns over counts besides one run's step. This starts `--card-runs` (6) real
runs at once, each `evotui run --headless` at the gpu profile with
`model.gpu_share` = `--card-share` (0.15: six add up to 0.9), seeds 0..5, first with
today's settings, then with `--card-new` on top, and counts the training rollouts
the card stores per second with all of them in their training steps:

- the runs train on the bench's math harness (no dead groups: every step trains),
  evolution off, held-out sets of 8 problems at the start only;
- a run's clock starts at the first step it stores after every run has stored one
  (start-up, graph capture and the first step's compilation are outside), and stops
  at its last step stored before the window closes; its rate is its rollouts over
  that time, and the card's is the sum over runs, with a 95% interval from the
  spread of the runs' step times (delta method, the runs taken as independent);
- then every run gets SIGTERM (it stops at its step boundary, state saved), and one
  that has not exited within its grace is killed with its process group.

Each setting gets half of `--card-deadline` seconds in all, so one call fits a
command limit: `evotui bench -- --only card --card-deadline 540`. With `--card-mps` the
new setting's runs share the card through a private CUDA MPS daemon (`backend/mps.py`:
their kernels run at once instead of in turns); `--card-new ""` then measures MPS alone.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 30.0  # SIGTERM to kill: a step in flight finishes and saves
POLL_S = 0.25


@dataclass
class Progress:
    """When each of a run's steps was first seen stored (bench clock), and its rollouts so far."""

    seen: list[tuple[float, int]] = field(default_factory=list)  # (time, rollouts stored by then)
    steps: int = 0


def _read(run_dir: Path) -> tuple[int, int]:
    """(steps stored, training rollouts stored) of a run; (0, 0) before its database exists."""
    from backend.store import Store

    db = run_dir / "run.db"
    if not db.exists():
        return 0, 0
    try:
        store = Store.open(db, readonly=True)
    except Exception:  # still being created
        return 0, 0
    try:
        return int(store.last_step()), store.train_rollout_count()
    except Exception:
        return 0, 0
    finally:
        store.close()


def run_sets(b, share: float, cuda: bool) -> list[str]:
    """The `--set` overrides every run of the section gets."""
    from .bench_common import bench_harness

    sets = [f"model.name={b.a.model}", f"model.gguf_file={b.a.gguf}", f"model.device={b.device}",
            "evolve.enabled=false", "eval.every=1000000", "eval.n_val=8", "eval.n_test=8",
            f"harness={bench_harness()}"]
    if cuda:
        sets.append(f"model.gpu_share={share}")
    else:  # CPU: the bench's small sizes, one thread a run
        sets += [f"train.tasks_per_step={b.a.tasks}", f"train.group_size={b.a.group}",
                 f"train.max_new_tokens_cap={b.a.step_new}", "model.threads=1"]
    return sets


def launch(b, out: Path, k: int, sets: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "evotui", "run", "--headless", "--quiet",
            "--profile", "gpu" if b.cuda else "cpu", "--run-dir", str(out / f"run{k}"),
            "--seed", str(k), "--steps", "1000000"]
    for s in sets:
        args += ["--set", s]
    log = open(out / f"run{k}.log", "w")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def stop(procs: list[subprocess.Popen]) -> list[int | None]:
    """SIGTERM to each run, then a kill of its process group after `GRACE_S`; exit codes."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return [p.returncode for p in procs]


def measure(b, label: str, extra: list[str], budget_s: float, env: dict[str, str] | None = None) -> dict:
    """One setting: start the runs, wait for each to store a step, count until the window closes.
    `env`: more environment for the runs (an MPS daemon's, `backend/mps.py`)."""
    t_start = time.monotonic()
    out = Path(b.out / f"card-{label}" if b.out else tempfile.mkdtemp(prefix=f"evotui-card-{label}-"))
    out.mkdir(parents=True, exist_ok=True)
    n = b.a.card_runs
    sets = run_sets(b, b.a.card_share, b.cuda) + extra
    procs = [launch(b, out, k, sets, env) for k in range(n)]
    runs = [Progress() for _ in range(n)]
    close = t_start + budget_s - GRACE_S - 5
    t0 = None  # every run has stored a step
    while time.monotonic() < close and any(p.poll() is None for p in procs):
        now = time.monotonic()
        for k, r in enumerate(runs):
            steps, rollouts = _read(out / f"run{k}")
            if steps > r.steps:
                r.steps = steps
                if t0 is not None:
                    r.seen.append((now, rollouts))
        if t0 is None and all(r.steps for r in runs):
            t0 = now
            b.log(f"card {label}: all {n} runs stored a step after {now - t_start:.0f}s")
        time.sleep(POLL_S)
    codes = stop(procs)
    b.log(f"card {label}: stopped, exit codes {codes}; logs in {out}")
    return {"label": label, "sets": extra, "rates": [_rate(r) for r in runs], "codes": codes, "out": str(out),
            "started_s": (t0 - t_start) if t0 else None, "window_s": (close - t0) if t0 else 0.0}


def _rate(r: Progress) -> dict:
    """A run's rollouts per second between its first and last step seen in the window, with the
    variance of that ratio estimate from its steps (delta method)."""
    if len(r.seen) < 2:
        return {"steps": max(0, len(r.seen) - 1), "rate": None, "var": None}
    dts = [b[0] - a[0] for a, b in zip(r.seen, r.seen[1:])]
    ros = [b[1] - a[1] for a, b in zip(r.seen, r.seen[1:])]
    rate = sum(ros) / sum(dts)
    k = len(dts)
    if k < 2:
        return {"steps": k, "rate": rate, "var": None}
    mean_dt = sum(dts) / k
    resid = [ro - rate * dt for ro, dt in zip(ros, dts)]
    var = sum(e * e for e in resid) / (k - 1) / k / mean_dt ** 2
    return {"steps": k, "rate": rate, "var": var}


def _total(res: dict) -> tuple[float | None, float | None, int]:
    """Card rollouts/s (sum over runs), its 95% half-width, and how many runs had a rate."""
    rates = [r for r in res["rates"] if r["rate"] is not None]
    if len(rates) < len(res["rates"]) or not rates:
        return None, None, len(rates)
    total = sum(r["rate"] for r in rates)
    var = [r["var"] for r in rates]
    half = 1.96 * math.sqrt(sum(var)) if all(v is not None for v in var) else None
    return total, half, len(rates)


def card_rows(b) -> list[dict]:
    """Row fields: the card's rollouts/s with today's settings against `--card-new`."""
    from backend.mps import MpsDaemon

    new = [s.strip() for s in b.a.card_new.split(",") if s.strip()]
    half = b.a.card_deadline / 2
    today = measure(b, "today", [], half)
    if b.a.card_mps:
        with MpsDaemon.start() as mps:
            b.log(f"card new: under a private MPS daemon ({mps.env['CUDA_MPS_PIPE_DIRECTORY']})" if mps.env
                  else f"card new: no MPS daemon: {mps.why}")
            ours = measure(b, "new", new, half, mps.env)
            new += ["MPS" if mps.env else f"MPS asked for, not running ({mps.why})"]
    else:
        ours = measure(b, "new", new, half)
    t, t_half, t_n = _total(today)
    o, o_half, o_n = _total(ours)
    n = b.a.card_runs

    def fmt(v, h):
        return "no rate" if v is None else f"{v:,.1f} rollouts/s" + (f" +- {h:,.1f}" if h is not None else "")

    def steps(res):
        return "/".join(str(r["steps"]) for r in res["rates"])

    share = f"model.gpu_share {b.a.card_share}, gpu profile" if b.cuda else "CPU, one thread each, cpu profile"
    note = (f"{n} runs x ({share}); steps timed per run: today {steps(today)}, new {steps(ours)}; "
            f"windows {today['window_s']:.0f}s / {ours['window_s']:.0f}s after start-ups of "
            f"{today['started_s'] or 0:.0f}s / {ours['started_s'] or 0:.0f}s; new: {', '.join(new) or '-'}")
    if t_n < n or o_n < n:
        note += f"; runs with a rate: {t_n} / {o_n} of {n} (a longer --card-deadline, or see the logs)"
    return [dict(what=f"card throughput, {n} runs sharing one card", baseline=fmt(t, t_half),
                 ours=fmt(o, o_half), ratio=f"{o / t:.2f}x" if t and o else "", note=note,
                 data={"today": today, "new": ours})]
