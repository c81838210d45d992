"""`evotui bench --only card`: rollouts per second of one card that several runs share.

Users pack runs on a card (a compare's `--jobs`, a population's members), so what a
card turns over counts besides one run's step. This starts `--card-runs` (6) real
runs at once, each `evotui run --headless` at the gpu profile with
`model.gpu_share` = `--card-share` (0.15: six add up to 0.9), seeds 0..5, first with
today's settings, then with `--card-new` on top, and counts the training rollouts
the card stores per second with all of them in their training steps:

- the runs train on the bench's math harness (no dead groups: every step trains),
  evolution off, held-out sets of 8 problems at the start only;
- both settings are timed over the same training steps: from the first step every
  run of either setting stored after all runs of its setting had stored one
  (start-up, graph capture and the first step's compilation are outside) to the last
  step every run of either setting reached before its window closed. A run's rate is
  its rollouts over the time between those steps, and the card's is the sum over runs,
  with a 95% interval from the spread of the runs' step times (delta method, the runs
  taken as independent). The same steps, because a step's cost follows the policy: as
  training shortens or lengthens completions, a setting timed over later steps would
  be timed on other work (the note gives the completion tokens a step of each);
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

    seen: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(time, steps, rollouts, completion tokens), each stored by then."""
    steps: int = 0


def _read(run_dir: Path) -> tuple[int, int, int]:
    """(steps, training rollouts, their completion tokens) a run has stored; zeros before its
    database exists."""
    from backend.store import Store

    db = run_dir / "run.db"
    if not db.exists():
        return 0, 0, 0
    try:
        store = Store.open(db, readonly=True)
    except Exception:  # still being created
        return 0, 0, 0
    try:
        return int(store.last_step()), store.train_rollout_count(), store.train_token_count()
    except Exception:
        return 0, 0, 0
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
            steps, rollouts, tokens = _read(out / f"run{k}")
            if steps > r.steps:
                r.steps = steps
                if t0 is not None:
                    r.seen.append((now, steps, rollouts, tokens))
        if t0 is None and all(r.steps for r in runs):
            t0 = now
            b.log(f"card {label}: all {n} runs stored a step after {now - t_start:.0f}s")
        time.sleep(POLL_S)
    codes = stop(procs)
    b.log(f"card {label}: stopped, exit codes {codes}; logs in {out}")
    return {"label": label, "sets": extra, "runs": runs, "codes": codes, "out": str(out),
            "started_s": (t0 - t_start) if t0 else None, "window_s": (close - t0) if t0 else 0.0}


def common_steps(results: list[dict]) -> tuple[int, int] | None:
    """The steps every run of every result saw stored: (first, last), or None when they share
    fewer than two."""
    runs = [r for res in results for r in res["runs"]]
    if not runs or any(not r.seen for r in runs):
        return None
    lo, hi = max(r.seen[0][1] for r in runs), min(r.seen[-1][1] for r in runs)
    return (lo, hi) if hi > lo else None


def _rate(r: Progress, steps: tuple[int, int] | None = None) -> dict:
    """A run's rollouts per second between its first and last step seen in the window, or within
    `steps` (first, last) when given, with the variance of that ratio estimate from its steps
    (delta method) and its completion tokens a step."""
    seen = [s for s in r.seen if steps is None or steps[0] <= s[1] <= steps[1]]
    if len(seen) < 2:
        return {"steps": max(0, len(seen) - 1), "rate": None, "var": None, "tokens": None}
    dts = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
    ros = [b[2] - a[2] for a, b in zip(seen, seen[1:])]
    tokens = (seen[-1][3] - seen[0][3]) / (seen[-1][1] - seen[0][1])
    rate = sum(ros) / sum(dts)
    k = len(dts)
    if k < 2:
        return {"steps": k, "rate": rate, "var": None, "tokens": tokens}
    mean_dt = sum(dts) / k
    resid = [ro - rate * dt for ro, dt in zip(ros, dts)]
    var = sum(e * e for e in resid) / (k - 1) / k / mean_dt ** 2
    return {"steps": k, "rate": rate, "var": var, "tokens": tokens}


def _total(rates: list[dict]) -> tuple[float | None, float | None, int]:
    """Card rollouts/s (sum over runs), its 95% half-width, and how many runs had a rate."""
    have = [r for r in rates if r["rate"] is not None]
    if len(have) < len(rates) or not have:
        return None, None, len(have)
    total = sum(r["rate"] for r in have)
    var = [r["var"] for r in have]
    half = 1.96 * math.sqrt(sum(var)) if all(v is not None for v in var) else None
    return total, half, len(have)


def ratio_interval(base: float, base_half: float | None, ours: float, ours_half: float | None
                   ) -> tuple[float, float] | None:
    """95% interval of ours / base from the two rates' 95% half-widths: the delta method on the
    log of the ratio, the settings taken as independent (they run one after the other).

    >>> [round(x, 2) for x in ratio_interval(1140.3, 155.2, 1831.0, 190.8)]
    [1.35, 1.91]
    """
    if not base or not ours or base_half is None or ours_half is None:
        return None
    se = math.sqrt(_log_ratio_var(base, base_half, ours, ours_half))
    r = ours / base
    return r * math.exp(-1.96 * se), r * math.exp(1.96 * se)


def _log_ratio_var(base: float, base_half: float, ours: float, ours_half: float) -> float:
    """Variance of log(ours / base) from the two rates' 95% half-widths (the delta method)."""
    return (base_half / 1.96 / base) ** 2 + (ours_half / 1.96 / ours) ** 2


def ratio_text(base, base_half, ours, ours_half) -> str:
    """"1.61x [1.35, 1.91]": the card's ratio and its interval (`ratio_interval`), or ""."""
    if not base or not ours:
        return ""
    ci = ratio_interval(base, base_half, ours, ours_half)
    return f"{ours / base:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def pooled_ratio(lanes: list[dict]) -> dict:
    """Several card rows' `data` (independent lanes timing today against the same new setting)
    pooled into one ratio: each lane's log ratio weighted by its inverse variance (the delta
    method of `ratio_interval`), with the pooled 95% interval.

    >>> lane = {"today": {"rates": [{"rate": 100.0, "var": 25.0}]}, "new": {"rates": [{"rate": 160.0, "var": 64.0}]}}
    >>> p = pooled_ratio([lane, lane])
    >>> round(p["ratio"], 2), [round(x, 3) for x in p["ci"]], p["lanes"]
    (1.6, [1.451, 1.765], 2)
    """
    logs, weights = [], []
    for lane in lanes:
        t, t_half, _ = _total(lane["today"]["rates"])
        o, o_half, _ = _total(lane["new"]["rates"])
        if not t or not o or t_half is None or o_half is None:
            raise ValueError("a lane without a rate and its interval for both settings cannot be pooled")
        logs.append(math.log(o / t))
        weights.append(1 / _log_ratio_var(t, t_half, o, o_half))
    mean = sum(w * x for w, x in zip(weights, logs)) / sum(weights)
    se = math.sqrt(1 / sum(weights))
    return {"ratio": math.exp(mean), "ci": (math.exp(mean - 1.96 * se), math.exp(mean + 1.96 * se)),
            "lanes": len(lanes), "each": [math.exp(x) for x in logs]}


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
    span = common_steps([today, ours])
    rates = {res["label"]: [_rate(r, span) for r in res["runs"]] for res in (today, ours)}
    every = {res["label"]: [_rate(r) for r in res["runs"]] for res in (today, ours)}
    t, t_half, t_n = _total(rates["today"])
    o, o_half, o_n = _total(rates["new"])
    n = b.a.card_runs

    def fmt(v, h):
        return "no rate" if v is None else f"{v:,.1f} rollouts/s" + (f" +- {h:,.1f}" if h is not None else "")

    def steps(label):
        return "/".join(str(r["steps"]) for r in rates[label])

    def tokens(label):
        xs = [r["tokens"] for r in rates[label] if r["tokens"] is not None]
        return f"{sum(xs) / len(xs):,.0f}" if xs else "-"

    def all_steps(label):
        total, _, _ = _total(every[label])
        seen = "/".join(str(r["steps"]) for r in every[label])
        return f"{label} {seen} steps at {fmt(total, None)}"

    share = f"model.gpu_share {b.a.card_share}, gpu profile" if b.cuda else "CPU, one thread each, cpu profile"
    where = f"steps {span[0]}-{span[1]} of every run" if span else "no steps in common: no rate"
    note = (f"{n} runs x ({share}); timed over {where}: steps a run today {steps('today')}, new {steps('new')}; "
            f"completion tokens a step: today {tokens('today')}, new {tokens('new')}; every step seen: "
            f"{all_steps('today')}, {all_steps('new')}; windows {today['window_s']:.0f}s / {ours['window_s']:.0f}s "
            f"after start-ups of {today['started_s'] or 0:.0f}s / {ours['started_s'] or 0:.0f}s; "
            f"new: {', '.join(new) or '-'}")
    if t_n < n or o_n < n:
        note += f"; runs with a rate: {t_n} / {o_n} of {n} (a longer --card-deadline, or see the logs)"
    data = {res["label"]: {k: v for k, v in res.items() if k != "runs"} | {"rates": rates[res["label"]],
                                                                             "every_step": every[res["label"]]}
            for res in (today, ours)}
    return [dict(what=f"card throughput, {n} runs sharing one card", baseline=fmt(t, t_half),
                 ours=fmt(o, o_half), ratio=ratio_text(t, t_half, o, o_half), note=note,
                 data={**data, "steps": span})]
