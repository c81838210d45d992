"""`evotui compare`: does co-evolution beat a static harness under the same budget?

Five arms from one config and one seed set (`--arms` picks some; they run by default):

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

and three arms with several runs a seed, run when `--arms` names them: population,
population-copy and best-of-n (compare_population.py).

Every arm is a normal run directory (openable in the TUI) under OUT/ARM-sSEED.
A compare over an OUT that already holds finished arms keeps them (resume:
unfinished ones go on), so a grid can be split over several calls; the
report reads every run under OUT.

With `--jobs N` the runs are parallel processes; when several GPUs are
visible each run is pinned to one (`CUDA_VISIBLE_DEVICES`), always the GPU
with the fewest runs on it (round-robin while they all start together). With `--mps` as well,
the runs share their cards through one private CUDA MPS daemon (backend/mps.py), each told the
daemon's pipe folder and its GPU as the daemon's server numbers it.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

from backend.config import RunConfig, apply_overrides, config_from_dict, to_dict
from backend.errors import UsageError
from backend.harness.loader import default_harness_path
from backend.mps import MpsDaemon

from backend.grid import CARD_USE, Stopping, card_share, grid_config, pick_gpu, visible_gpus  # noqa: F401

from .compare_population import GROUP_ARMS, SIZE, Unit, group_config, size_of, started, units

ARMS = ("static", "static-expert", "coevolve", "coevolve-expert", "control")
"""The single-run arms: what a compare runs when `--arms` is not given."""
ALL_ARMS = ARMS + GROUP_ARMS
EVOLVING = ("coevolve", "coevolve-expert")
EXPERT_HARNESSES = {"math": default_harness_path("math_expert"), "code": default_harness_path("code_expert"),
                    "swe": default_harness_path("swe_expert")}
"""The hand-written expert harness of each domain that has one (the `-expert` arms)."""


def parse_arms(text: str | None) -> list[str]:
    """`--arms a,b,c` in ALL_ARMS order; None or empty: the five single-run arms."""
    if not text:
        return list(ARMS)
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ALL_ARMS]
    if unknown or not arms:
        raise UsageError(f"--arms: unknown arm(s) {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(ALL_ARMS)}")
    return [a for a in ALL_ARMS if a in arms]


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
    sets = [f"seed={seed}", f"name={arm}", "population.size=0"]  # a compare's N is for its population arms
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


def arm_row(arm: str, seed: int, out: Path, extra: int = 0, codes: dict | None = None,
            errors: dict | None = None, size: int = 0) -> dict:
    """One arm and seed's line in compare.json: `_row` for a single-run arm, the reported
    member's for the arms with several runs (`report_population.group_row`; `size`: their N).
    `codes` and `errors`: by unit label, the exit codes and errors of this call's processes."""
    codes, errors = codes or {}, errors or {}
    if arm in GROUP_ARMS:
        return group_row(arm, seed, out, codes, errors, size or SIZE)
    label = f"{arm}-s{seed}"
    return _row(arm, seed, out / label, extra, codes.get(label), errors.get(label))


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
    merged.sort(key=lambda r: (r["seed"], ALL_ARMS.index(r["arm"]) if r["arm"] in ALL_ARMS else len(ALL_ARMS)))
    path.write_text(json.dumps(merged, indent=2))
    return merged


def run_args(out: Path, base_d: dict, arm: str, seed: int, extra: int) -> list[str]:
    """The `evotui run --headless` arguments of a single-run arm's run under OUT: `--resume` where
    its run directory exists (a rerun goes on from the last checkpoint), else a new run from the
    arm's config, written to OUT/configs (`--jobs` and `--ray` both launch runs this way; every
    unit, population arms included: `compare_population.unit_args`)."""
    return unit_args(out, base_d, units(arm, seed, out, 1)[0], extra)


def plan(arms: list[str], seeds: list[int], out: Path, size: int, jobs: int) -> list[Unit]:
    """Every unit of the grid but the controls, in launch order: the evolving arms first (they run
    about twice as long, and a long run started last leaves the other slots idle at the end:
    `--jobs 8` over 15 runs, one wave less), then the populations, then the rest."""
    first = [a for a in arms if a != "control"]
    first.sort(key=lambda a: (a not in EVOLVING, a not in GROUP_ARMS[:2]))
    return [u for arm in first for seed in seeds for u in units(arm, seed, out, size, jobs)]


def unit_args(out: Path, base_d: dict, u: Unit, extra: int = 0) -> list[str]:
    """The `evotui run --headless` arguments of one unit: `--resume` where it was started, else a
    new run (or population) from its config, written to OUT/configs."""
    from backend.config import to_toml

    jobs = ["--jobs", str(u.slots)] if u.population else []  # its members training at once
    if started(u):
        return ["--resume", str(u.run_dir), *jobs]
    cfg = group_config(base_d, u.arm, u.seed, u.member) if u.arm in GROUP_ARMS else \
        arm_config(base_d, u.arm, u.seed, extra)
    cfgf = out / "configs" / f"{u.label}.toml"
    cfgf.parent.mkdir(parents=True, exist_ok=True)
    cfgf.write_text(to_toml(cfg))
    auto = u.arm in EVOLVING or u.population
    return ["--config", str(cfgf), "--run-dir", str(u.run_dir), "--auto-promote" if auto else "--supervised", *jobs]


def unit_gpus(u: Unit, gpus: list[str], busy: list[str]) -> list[str]:
    """The GPUs a unit is pinned to (CUDA_VISIBLE_DEVICES): a run gets the least busy one, a
    population its `slots` least busy ones (its coordinator spreads the members over them);
    empty with 0 or 1 visible GPU."""
    chosen: list[str] = []
    for _ in range(u.slots):
        g = pick_gpu(gpus, busy + chosen)
        if g is not None and g not in chosen:
            chosen.append(g)
    return chosen


def finished(u: Unit) -> bool:
    """The unit's run (or population) finished every step."""
    if u.population:
        from .report_population import population_finished

        return population_finished(u.run_dir)
    return _finished(u.run_dir)


def group_row(arm: str, seed: int, out: Path, codes: dict, errors: dict, size: int) -> dict:
    """One line in compare.json for an arm with several runs a seed: the reported member's final
    test accuracy with its 95% Wilson interval, and the rollouts every run of the group used
    (report_population.py; `size`: best-of-n's runs)."""
    from backend.population.store import PopulationStore

    from .report import collect_run
    from .report_population import Group, group_record, population_group, test_interval

    d = out / f"{arm}-s{seed}"
    us = units(arm, seed, out, size)
    if arm in GROUP_ARMS[:2]:
        g = population_group(d, arm, seed) if PopulationStore.exists(d) else Group(arm, seed, d, ())
    else:
        g = Group(arm, seed, d, tuple(u.run_dir for u in us))
    labels = [u.label for u in us]
    row: dict = {"arm": arm, "seed": seed, "run_dir": str(d), "members": len(g.members), "reported": None,
                 "exit_code": next((codes[x] for x in labels if codes.get(x)), None), "heldout_acc": None,
                 "heldout_acc_start": None, "test": None, "rollouts_used": 0, "promoted": 0,
                 "status": "not started", "steps_done": 0, "steps_total": None, "complete": False}
    if any(started(u) for u in us):
        r = group_record(g, collect_run)
        tests = r["test_evals"]
        row.update(reported=r["member"], heldout_acc=tests[-1]["accuracy"] if tests else None,
                   heldout_acc_start=tests[0]["accuracy"] if tests else None, test=test_interval(r),
                   val_acc=r["val_evals"][-1]["accuracy"] if r["val_evals"] else None,
                   rollouts_used=r["rollouts_used"], train_rollouts=r["train_rollouts"],
                   search_rollouts=r["search_rollouts"], promoted=len(r["promoted"]), status=r["status"],
                   steps_done=r["steps_done"], steps_total=r["steps_total"], complete=r["complete"])
    if not row["complete"]:
        logs = [u.log for u in us] + sorted((d / "logs").glob("*.log"))
        row["last_line"] = (next((line for log in logs if (line := _last_line(log))), None)
                            or next((errors[x] for x in labels if errors.get(x)), None) or "(no output)")
    return row


def mps_daemon(asked: bool, gpus: list[str]) -> MpsDaemon:
    """The private MPS daemon a `--mps` grid's runs share their cards through, under a short temp
    folder (its pipe is a unix socket, whose path may hold about 108 characters: not under OUT);
    a daemon that is not running when not asked for, without GPUs, or when it cannot start,
    with one line saying so. Use it as a context manager: the daemon is told to quit at the end."""
    if not asked:
        return MpsDaemon()
    if not gpus:
        print("--mps applies to GPU runs only: no GPU is visible, so it is ignored", flush=True)
        return MpsDaemon()
    mps = MpsDaemon.start()
    if mps.env:
        print(f"--mps: the runs share their cards through an MPS daemon (its logs: "
              f"{mps.pipes['CUDA_MPS_LOG_DIRECTORY']})", flush=True)
    else:
        print(f"--mps: {mps.why}", flush=True)
    return mps


def run_parallel(base: RunConfig, seeds: list[int], out: Path, jobs: int, quiet: bool = False,
                 arms: list[str] | None = None, mps: bool = False) -> list[dict]:
    """Like `run_compare`, with runs as parallel `evotui run --headless` processes on one
    machine: every arm but the control first; each seed's control starts when that seed's
    coevolve arm ends, as its budget depends on its probes. A population holds as many of the
    `jobs` slots as it has members training at once (`Unit.slots`). Several visible GPUs: each
    run on the GPU with the fewest runs where `jobs` allows (see `pick_gpu`), a population's
    members spread over its least busy ones (`unit_gpus`). `mps`: the runs share their cards
    through one private MPS daemon (`mps_daemon`), told to quit when the grid ends."""
    import subprocess
    import sys
    import time

    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    gpus = visible_gpus()
    base_d = grid_config(base, jobs, gpus, quiet)
    size = size_of(base)

    def launch(u: Unit, extra: int, pinned: list[str]):
        args = unit_args(out, base_d, u, extra)
        env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ",".join(pinned)} if pinned else {}))
        env.update(daemon.client_env(pinned))  # under MPS: the server's numbers for the pinned GPUs
        if not gpus and jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
            # CPU runs side by side: a thread pool per core in each would oversubscribe the cores,
            # and OpenMP's spin-waits then slow every run many times over (README, bench --quick)
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
        u.log.parent.mkdir(parents=True, exist_ok=True)
        with open(u.log, "a") as log:  # the child keeps its own copy
            if not quiet and pinned:
                print(f"{_who(u)}: started on GPU {','.join(pinned)}", flush=True)
            return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                                    stdout=log, stderr=subprocess.STDOUT, env=env)

    def ended(u: Unit, how: str) -> None:
        if not quiet:
            print(f"{_who(u)}: {how}", flush=True)
        if u.arm == "coevolve" and "control" in arms:
            extras[u.seed] = _extra_tasks(base, out, u.seed)
            pending.extend(units("control", u.seed, out, size, jobs))

    pending = plan(arms, seeds, out, size, jobs)
    if "control" in arms and "coevolve" not in arms:  # check_arms saw each seed's coevolve finished
        for seed in seeds:
            ended(units("coevolve", seed, out, size)[0], "finished before")
    running: list[tuple] = []  # (process, unit, the GPU of each of its slots)
    extras: dict[int, int] = {}
    codes: dict[str, int] = {}

    def launch_pending() -> None:
        while pending and sum(u.slots for _, u, _ in running) + pending[0].slots <= jobs:
            u = pending.pop(0)
            if finished(u):  # compare run again over the same --out: kept as is
                ended(u, "finished before")
                continue
            pinned = unit_gpus(u, gpus, [g for *_, busy in running for g in busy])
            proc = launch(u, extras.get(u.seed, 0) if u.arm == "control" else 0, pinned)
            running.append((proc, u, [pinned[i % len(pinned)] for i in range(u.slots)] if pinned else []))

    def reap() -> None:
        for item in list(running):
            proc, u, _ = item
            if proc.poll() is not None:
                running.remove(item)
                codes[u.label] = proc.returncode
                ended(u, f"exit {proc.returncode}")

    with mps_daemon(mps, gpus) as daemon, Stopping() as stopping:
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
    rows = [arm_row(arm, seed, out, extras.get(seed, 0) if arm == "control" else 0, codes, size=size)
            for seed in seeds for arm in arms]
    return _write_rows(out, rows)


def _who(u: Unit) -> str:
    """A unit in printed lines: `coevolve        seed 0`, `best-of-n       seed 0 r1`."""
    return f"{u.arm:<15} seed {u.seed}" + (f" {u.run_dir.name}" if u.arm == "best-of-n" else "")


def run_compare(base: RunConfig, seeds: list[int], out: Path, quiet: bool = False,
                arms: list[str] | None = None) -> list[dict]:
    """Run the chosen arms for every seed, one after another; returns one row per run
    (this call's and those earlier calls left in OUT/compare.json). An arm that fails does not
    stop the others; its row says how far it got and why (see `failures`). A stop request
    (SIGTERM, Ctrl-C: `Stopping`) stops the run it reaches at its next step boundary, and the
    grid with it."""
    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
    size = size_of(base)
    reached: dict[tuple[str, int], dict] = {}
    with Stopping() as stopping:  # between runs; during one, the run's own handler stops it
        for seed, arm in ((seed, arm) for seed in seeds for arm in arms):  # ARMS order: coevolve before control
            if stopping.requested:
                break
            extra = _extra_tasks(base, out, seed) if arm == "control" else 0
            errors: dict[str, str] = {}
            for u in units(arm, seed, out, size):
                if stopping.requested:
                    break
                if error := _run_unit(u, base_d, out, extra, quiet, stopping):
                    errors[u.label] = error
                if _stopped_on_request(u.run_dir):  # the signal reached the run: the grid stops with it
                    stopping.requested = True
            reached[(arm, seed)] = r = arm_row(arm, seed, out, extra, errors=errors, size=size)
            if not quiet:
                acc = [f"{v:.3f}" if v is not None else "n/a" for v in (r["heldout_acc"], r["heldout_acc_start"])]
                how = (f"held-out {acc[0]} (start {acc[1]})" if r["complete"]
                       else f"{r['status']} at step {r['steps_done']}: {r['last_line']}")
                print(f"{arm:<15} seed {seed}: {how}", flush=True)
    rows = [reached.get((arm, seed)) or arm_row(arm, seed, out, size=size) for seed in seeds for arm in arms]
    return _write_rows(out, rows)


def _run_unit(u: Unit, base_d: dict, out: Path, extra: int, quiet: bool, stopping: Stopping) -> str | None:
    """Run (or resume) one unit to its end in this process (a population: its coordinator as a
    child process, sent SIGTERM on a stop request); returns the error that ended it, if any."""
    from backend import runs
    from backend.errors import EvoError

    try:
        if finished(u):  # compare run again over the same --out: only unfinished arms go on
            return None
        if u.population:
            return _run_child(u, unit_args(out, base_d, u), quiet, stopping)
        if started(u):
            runs.resume(u.run_dir, quiet=quiet)
        elif u.arm == "best-of-n":
            runs.start(group_config(base_d, u.arm, u.seed, u.member), u.run_dir, quiet=quiet)
        else:
            runs.start(arm_config(base_d, u.arm, u.seed, extra), u.run_dir, quiet=quiet)
    except Exception as e:  # a stopped or crashed arm is a row with its reason; the grid goes on
        return e.cli_line() if isinstance(e, EvoError) else f"{type(e).__name__}: {e}"
    return None


def _run_child(u: Unit, args: list[str], quiet: bool, stopping: Stopping) -> str | None:
    """`evotui run --headless ARGS` as a child process, its output to the unit's log; a stop
    request is passed on as SIGTERM (the child saves its state and ends)."""
    import subprocess
    import sys
    import time

    u.log.parent.mkdir(parents=True, exist_ok=True)
    with open(u.log, "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *args],
                                stdout=log, stderr=subprocess.STDOUT)
    sent = False
    while proc.poll() is None:
        if stopping.requested and not sent:
            proc.send_signal(signal.SIGTERM)
            sent = True
        time.sleep(0.5)
    if proc.returncode and not sent:
        return f"exit {proc.returncode}" + (f" (killed by signal {-proc.returncode})" if proc.returncode < 0 else "")
    return None
