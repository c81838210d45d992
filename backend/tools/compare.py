"""`evotui compare`: does co-evolution beat a static harness under the same budget?

Five arms from one config and one seed set (`--arms` picks some):

- static:          the default harness, evolution off
- static-expert:   the domain's shipped expert harness (harness/defaults/math_expert.py:
                   reward = the evaluator's own check; code_expert.py: partial
                   credit by hidden cases passed and a syntax term; swe_expert.py:
                   resolve plus edit-format, localisation and tests-passed shaping;
                   all drop dead groups), evolution off: what a careful engineer writes by hand
- coevolve:        the default harness, offline proposer, auto-promote
- coevolve-expert: the expert harness, co-evolved like `coevolve`
- control:         static harness, but it spends the coevolve arm's extra
                   rollouts (backtest probes) of the same seed on ordinary
                   training, so a win cannot come from extra compute

Every arm is a normal run directory (openable in the TUI) under OUT/ARM-sSEED.
A compare over an OUT that already holds finished arms keeps them (resume:
unfinished ones go on), so a grid can be split over several calls; the
report reads every run under OUT.

With `--jobs N` the runs are parallel processes; when several GPUs are
visible each run is pinned to one (`CUDA_VISIBLE_DEVICES`), always the GPU
with the fewest runs on it (round-robin while they all start together).
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

from backend.config import RunConfig, apply_overrides, config_from_dict, to_dict
from backend.errors import UsageError
from backend.harness.loader import default_harness_path

ARMS = ("static", "static-expert", "coevolve", "coevolve-expert", "control")
EVOLVING = ("coevolve", "coevolve-expert")
EXPERT_HARNESSES = {"math": default_harness_path("math_expert"), "code": default_harness_path("code_expert"),
                    "swe": default_harness_path("swe_expert")}
"""The hand-written expert harness of each domain that has one (the `-expert` arms)."""


def parse_arms(text: str | None) -> list[str]:
    """`--arms a,b,c` in ARMS order; None or empty: all five."""
    if not text:
        return list(ARMS)
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise UsageError(f"--arms: unknown arm(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(ARMS)}")
    return [a for a in ARMS if a in arms]


def check_arms(base: RunConfig, arms: list[str], seeds: list[int], out: Path) -> None:
    """Raise UsageError for a grid that cannot run: an expert arm in a domain without an expert
    harness, or a control whose seed has no coevolve arm (in --arms, or finished under OUT) to
    take its budget from."""
    expert = len(base.domains) == 1 and base.domains[0] in EXPERT_HARNESSES
    if any(a.endswith("-expert") for a in arms) and not expert:
        raise UsageError(f"the expert arms need a domain with an expert harness ({', '.join(EXPERT_HARNESSES)}); "
                         f"domain is '{base.domain}'")
    if "control" in arms and "coevolve" not in arms:
        missing = [s for s in seeds if not _finished(out / f"coevolve-s{s}")]
        if missing:
            raise UsageError("the control arm spends its seed's coevolve probes; add coevolve to --arms "
                             f"(no finished coevolve run under {out} for seed(s) {missing})")


def arm_config(base: dict, arm: str, seed: int, extra_tasks: int = 0) -> RunConfig:
    data = json.loads(json.dumps(base))
    sets = [f"seed={seed}", f"name={arm}"]
    if arm.endswith("-expert"):
        data["harness"] = str(EXPERT_HARNESSES[data.get("domain", "math").strip()])
    if arm in ("static", "static-expert"):
        sets.append("evolve.enabled=false")
    elif arm in EVOLVING:
        # each run its own skill library: runs that read each other's cards (through a shared
        # $EVOTUI_HOME) are not independent samples of their arm
        sets += ["evolve.enabled=true", "evolve.auto_promote=true", "evolve.proposer='offline'",
                 "evolve.plant_trap=true", "evolve.skill_library='run'"]
    elif arm == "control":
        sets.append("evolve.enabled=false")
        tps = data.get("train", {}).get("tasks_per_step", RunConfig().train.tasks_per_step)
        sets.append(f"train.tasks_per_step={tps + extra_tasks}")
    return config_from_dict(apply_overrides(data, sets))


def probe_rollouts(run_dir: Path) -> int:
    """What the evolution's search cost outside training, in training rollouts (probe and trial
    arms, replay converted by time: backend/evolve/budget.py): the control arm trains on as many."""
    from backend.evolve.budget import search_budget
    from backend.store import Store

    s = Store.open(run_dir, readonly=True)
    try:
        return math.ceil(search_budget(s)["search_rollouts"])
    finally:
        s.close()


def _extra_tasks(base: RunConfig, out: Path, seed: int) -> int:
    probes = probe_rollouts(out / f"coevolve-s{seed}")
    per_step = base.train.group_size * max(base.steps, 1)
    return math.ceil(probes / per_step) if probes else 0


def _stored_run(run_dir: Path) -> dict | None:
    """The run's `runs` row, or None where no run was created there."""
    from backend.store import Store

    if not (run_dir / "run.db").exists():
        return None
    s = Store.open(run_dir, readonly=True)
    try:
        return dict(s.run())
    finally:
        s.close()


def _finished(run_dir: Path) -> bool:
    run = _stored_run(run_dir)
    return run is not None and run["status"] == "finished"


def _stopped_on_request(run_dir: Path) -> bool:
    """The run stopped because it was asked to (a signal, a stop command), not on an error."""
    run = _stored_run(run_dir)
    return run is not None and run["status"] == "stopped" and not run["error"]


def _row(arm: str, seed: int, run_dir: Path, extra: int, exit_code: int | None = None,
         error: str | None = None) -> dict:
    """One arm's line in compare.json: its result, how far it got (`complete`: every step), and
    for a run that did not finish, the exit code and the last line of its log."""
    from backend import runs
    from backend.store import Store

    from .report_stats import progress_facts

    row = {"arm": arm, "seed": seed, "run_dir": str(run_dir), "extra_tasks_per_step": extra, "exit_code": exit_code,
           "heldout_acc": None, "heldout_acc_start": None, "promoted": 0, "status": "failed", "steps_done": 0,
           "steps_total": None, "complete": False}
    if (run_dir / "run.db").exists():
        s = Store.open(run_dir, create=False)
        try:
            sm, prog, run_error = runs.summary(s), progress_facts(s), s.run()["error"]
        finally:
            s.close()
        row.update(heldout_acc=sm["heldout_acc"], heldout_acc_start=sm["heldout_acc_start"],
                   promoted=sm["promoted"], **prog)
        if not prog["complete"] and exit_code:  # the process is gone, whatever its row last said
            row["status"] = f"killed by signal {-exit_code}" if exit_code < 0 else prog["status"]
        error = error or run_error
    elif error is None and exit_code is None:
        row["status"] = "not started"  # a compare stopped before it came to this arm
    if not row["complete"]:
        row["last_line"] = _last_line(run_dir.parent / f"{arm}-s{seed}.log") or error or "(no output)"
    return row


def _last_line(log: Path) -> str | None:
    """The last non-empty line of an arm's log (parallel runs write one), or None."""
    try:
        lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def failures(rows: list[dict], arms: list[str], seeds: list[int]) -> list[str]:
    """One line per run of this grid that did not finish all its steps: which, how far, why."""
    return [f"{r['arm']}-s{r['seed']}: {r['status']} at step {r.get('steps_done', 0)} of {r.get('steps_total')}"
            + (f" (exit {r['exit_code']})" if r.get("exit_code") else "") + f"; last log line: {r.get('last_line')}"
            for r in rows if r["arm"] in arms and r["seed"] in seeds
            and not r.get("complete", r.get("status") == "finished")]


def _write_rows(out: Path, rows: list[dict]) -> list[dict]:
    """Merge this call's rows into OUT/compare.json (earlier calls' arms stay); return all rows."""
    path = out / "compare.json"
    old = json.loads(path.read_text()) if path.exists() else []
    mine = {(r["arm"], r["seed"]) for r in rows}
    merged = [r for r in old if (r.get("arm"), r.get("seed")) not in mine] + rows
    merged.sort(key=lambda r: (r["seed"], ARMS.index(r["arm"]) if r["arm"] in ARMS else len(ARMS)))
    path.write_text(json.dumps(merged, indent=2))
    return merged


def visible_gpus() -> list[str]:
    """The GPU ids runs can be pinned to: CUDA_VISIBLE_DEVICES if set, else torch's count."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


CARD_USE = 0.9
"""Share of a card that the runs placed on it may hold together (the rest: the CUDA context, other users)."""


def card_share(jobs: int, gpus: list[str], share: float) -> float:
    """`model.gpu_share` for a run of a `--jobs` grid: a set share is kept; runs that share a
    card (more jobs than visible GPUs) get an equal slice of it. Without one, the run that meets
    an out-of-memory error first halves its micro-batch for good, and which run that is depends
    on its neighbours: twins of one seed then train on different arithmetic
    (docs/results/gpu-trajectory-split).

    >>> card_share(8, ["0", "1"], 0.0), card_share(2, ["0", "1"], 0.0), card_share(8, [], 0.0)
    (0.225, 0.0, 0.0)
    >>> card_share(8, ["0", "1"], 0.5)
    0.5
    """
    if share or not gpus:
        return share
    per_card = math.ceil(jobs / len(gpus))
    return round(CARD_USE / per_card, 3) if per_card > 1 else share


def grid_config(base: RunConfig, jobs: int, gpus: list[str], quiet: bool = True) -> dict:
    """The config every new run of a `--jobs` grid starts from: `base`, with its card share."""
    base_d = to_dict(base)
    share = card_share(jobs, gpus, base.model.gpu_share)
    if share != base.model.gpu_share:
        base_d["model"]["gpu_share"] = share
        if not quiet:
            print(f"{jobs} runs over {len(gpus)} GPU(s): each new run holds at most {share:g} of its card "
                  "(model.gpu_share; set it to override)", flush=True)
    return base_d


def pick_gpu(gpus: list[str], busy: list[str]) -> str | None:
    """The visible GPU with the fewest running runs (the first on a tie); None with 0 or 1 GPU."""
    if len(gpus) < 2:
        return None
    return min(gpus, key=lambda g: (busy.count(g), gpus.index(g)))


def run_args(out: Path, base_d: dict, arm: str, seed: int, extra: int) -> list[str]:
    """The `evotui run --headless` arguments of one arm's run under OUT: `--resume` where its run
    directory exists (a rerun goes on from the last checkpoint), else a new run from the arm's
    config, written to OUT/configs (`--jobs` and `--ray` both launch runs this way)."""
    from backend.config import to_toml

    run_dir = out / f"{arm}-s{seed}"
    if (run_dir / "run.db").exists():
        return ["--resume", str(run_dir)]
    cfgf = out / "configs" / f"{arm}-s{seed}.toml"
    cfgf.parent.mkdir(parents=True, exist_ok=True)
    cfgf.write_text(to_toml(arm_config(base_d, arm, seed, extra)))
    return ["--config", str(cfgf), "--run-dir", str(run_dir), "--auto-promote" if arm in EVOLVING else "--supervised"]


class Stopping:
    """SIGTERM or Ctrl-C to a compare: launch no more runs, pass SIGTERM on to those running (each
    stops at its next step boundary with its state saved, `backend/loop.py`), wait for them, and
    write compare.json as usual; the same command again resumes. A second Ctrl-C leaves at once.

    Without it a SIGTERM (a scheduler's time limit, `timeout`) killed compare alone while its
    runs trained on as orphans, and a run it launched in the moment before could be killed while
    it was created (session 10's GPU grid: `runs.run_dirs_in`)."""

    def __init__(self) -> None:
        self.requested = False
        self.sent = False
        """The running runs were sent SIGTERM."""
        self._old: dict[signal.Signals, Any] = {}

    def __enter__(self) -> Stopping:
        import threading

        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGINT and self.requested:
            raise KeyboardInterrupt
        self.requested = True


def run_parallel(base: RunConfig, seeds: list[int], out: Path, jobs: int, quiet: bool = False,
                 arms: list[str] | None = None) -> list[dict]:
    """Like `run_compare`, with runs as parallel `evotui run --headless` processes on one
    machine: every arm but the control first; each seed's control starts when that seed's
    coevolve arm ends, as its budget depends on its probes. Several visible GPUs: one run
    per GPU at a time where `jobs` allows (see `pick_gpu`)."""
    import subprocess
    import sys
    import time

    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    gpus = visible_gpus()
    base_d = grid_config(base, jobs, gpus, quiet)

    def launch(arm: str, seed: int, extra: int, gpu: str | None):
        args = run_args(out, base_d, arm, seed, extra)
        env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
        if not gpus and jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
            # CPU runs side by side: a thread pool per core in each would oversubscribe the cores,
            # and OpenMP's spin-waits then slow every run many times over (README, bench --quick)
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
        with open(out / f"{arm}-s{seed}.log", "a") as log:  # the child keeps its own copy
            if not quiet and gpu is not None:
                print(f"{arm:<15} seed {seed}: started on GPU {gpu}", flush=True)
            return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                                    stdout=log, stderr=subprocess.STDOUT, env=env)

    def ended(arm: str, seed: int, how: str) -> None:
        if not quiet:
            print(f"{arm:<15} seed {seed}: {how}", flush=True)
        if arm == "coevolve" and "control" in arms:
            extras[seed] = _extra_tasks(base, out, seed)
            pending.append(("control", seed))

    first = [a for a in arms if a != "control"]
    # the evolving arms first: they run about twice as long, and a long run started last
    # leaves the other slots idle at the end (`--jobs 8` over 15 runs: one wave less)
    first.sort(key=lambda a: a not in EVOLVING)
    pending = [(arm, seed) for arm in first for seed in seeds]
    if "control" in arms and "coevolve" not in arms:  # check_arms saw each seed's coevolve finished
        for seed in seeds:
            ended("coevolve", seed, "finished before")
    running, extras, codes = [], {}, {}

    def launch_pending() -> None:
        while pending and len(running) < jobs:
            arm, seed = pending.pop(0)
            if _finished(out / f"{arm}-s{seed}"):  # compare run again over the same --out: kept as is
                ended(arm, seed, "finished before")
            else:
                gpu = pick_gpu(gpus, [g for *_, g in running])
                proc = launch(arm, seed, extras.get(seed, 0) if arm == "control" else 0, gpu)
                running.append((proc, arm, seed, gpu))

    def reap() -> None:
        for item in list(running):
            proc, arm, seed, _ = item
            if proc.poll() is not None:
                running.remove(item)
                codes[(arm, seed)] = proc.returncode
                ended(arm, seed, f"exit {proc.returncode}")

    with Stopping() as stopping:
        while running or (pending and not stopping.requested):
            if not stopping.requested:
                launch_pending()
            elif not stopping.sent:
                stopping.sent = True
                if not quiet:
                    print(f"stopping: {len(running)} run(s) finish their step and save; "
                          f"{len(pending)} not started (the same command again resumes)", flush=True)
                for proc, *_ in running:
                    proc.send_signal(signal.SIGTERM)
            reap()
            time.sleep(0.5)
    rows = [_row(arm, seed, out / f"{arm}-s{seed}", extras.get(seed, 0) if arm == "control" else 0,
                 codes.get((arm, seed))) for seed in seeds for arm in arms]
    return _write_rows(out, rows)


def run_compare(base: RunConfig, seeds: list[int], out: Path, quiet: bool = False,
                arms: list[str] | None = None) -> list[dict]:
    """Run the chosen arms for every seed, one after another; returns one row per run
    (this call's and those earlier calls left in OUT/compare.json). An arm that fails does not
    stop the others; its row says how far it got and why (see `failures`). A stop request
    (SIGTERM, Ctrl-C: `Stopping`) stops the run it reaches at its next step boundary, and the
    grid with it."""
    from backend import runs
    from backend.errors import EvoError

    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
    reached: dict[tuple[str, int], dict] = {}
    with Stopping() as stopping:  # between runs; during one, the run's own handler stops it
        for seed, arm in ((seed, arm) for seed in seeds for arm in arms):  # ARMS order: coevolve before control
            if stopping.requested:
                break
            extra = _extra_tasks(base, out, seed) if arm == "control" else 0
            run_dir = out / f"{arm}-s{seed}"
            error = None
            try:
                if _finished(run_dir):  # compare run again over the same --out: only unfinished arms go on
                    pass
                elif (run_dir / "run.db").exists():
                    runs.resume(run_dir, quiet=quiet)
                else:
                    runs.start(arm_config(base_d, arm, seed, extra), run_dir, quiet=quiet)
            except Exception as e:  # a stopped or crashed arm is a row with its reason; the grid goes on
                error = e.cli_line() if isinstance(e, EvoError) else f"{type(e).__name__}: {e}"
            reached[(arm, seed)] = r = _row(arm, seed, run_dir, extra, error=error)
            if not quiet:
                acc = [f"{v:.3f}" if v is not None else "n/a" for v in (r["heldout_acc"], r["heldout_acc_start"])]
                how = (f"held-out {acc[0]} (start {acc[1]})" if r["complete"]
                       else f"{r['status']} at step {r['steps_done']}: {r['last_line']}")
                print(f"{arm:<15} seed {seed}: {how}", flush=True)
            if _stopped_on_request(run_dir):  # the signal reached the run: the grid stops with it
                stopping.requested = True
    rows = [reached.get((arm, seed)) or _row(arm, seed, out / f"{arm}-s{seed}", 0) for seed in seeds for arm in arms]
    return _write_rows(out, rows)
