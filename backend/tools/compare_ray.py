"""`evotui compare --ray [ADDRESS]`: the compare grid as Ray tasks, one per process compare launches.

Each unit (`compare_population.Unit`: a run; one of best-of-n's N runs; a
population, whose coordinator trains its members as its own subprocesses) is a
Ray task that starts `evotui run --headless` for it (the same arguments `--jobs`
uses, `compare.unit_args`) on the node Ray places it: one GPU per run where the
cluster has GPUs (Ray sets CUDA_VISIBLE_DEVICES), one CPU otherwise; a
population asks for as many as it has members training at once (`Unit.slots`).
The run's output goes to its log (OUT/ARM-sSEED.log) and, line by line,
through a Ray queue to this process, which prints it prefixed with the run's
name. A task whose worker is lost (the node or the Ray worker dies, or
the run is killed by a signal) is rerun by Ray (`max_retries`); the rerun
finds the run directory and resumes it from its last checkpoint. When every
task has ended the rows and the report are made from OUT exactly as for
`--jobs`: OUT must therefore be on a filesystem every node sees (one host:
any folder).

Without ADDRESS a local Ray instance is started over this host's GPUs (or
CPUs); with one (`ray://HOST:10001`, `HOST:6379` or `auto`) the tasks go to
that cluster, whose nodes need evotui installed in the same Python.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from backend.config import RunConfig, to_dict
from backend.errors import UsageError

from .compare import ARMS, _extra_tasks, _write_rows, arm_row, check_arms, finished, unit_args
from .compare_population import Unit, size_of, units

RETRIES = 2
"""Reruns of a run whose worker was lost, each resuming from the run's last checkpoint."""


class RunInterrupted(RuntimeError):
    """The run's process was killed by a signal (its worker or node going away): Ray reruns the task."""


def import_ray():
    """The ray module, or one clear line saying how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'evotui[ray]' (or use --jobs N on one machine)") from None
    return ray


def _die_with_parent() -> None:
    """In the run's process: end it when the Ray worker that started it dies (Linux), so a rerun
    never finds the old run still going."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_arm(label: str, run_dir: str, new_args: list[str], log: str, queue, extra_resume: tuple = ()) -> int:
    """The Ray task: run (or resume) one unit's run or population to its end; returns its exit
    code. `extra_resume`: arguments a resume adds (a population's `--jobs`).

    Raises RunInterrupted when the run was killed by a signal, so Ray reruns the task."""
    import ray

    resuming = any((Path(run_dir) / name).exists() for name in ("run.db", "population.sqlite"))
    args = ["--resume", run_dir, *extra_resume] if resuming else new_args
    gpu_ids = ray.get_gpu_ids()
    node = socket.gethostname() + (f" GPU {','.join(str(g) for g in gpu_ids)}" if gpu_ids else "")
    queue.put((label, f"{'resuming' if resuming else 'started'} on {node}"))
    env = dict(os.environ, EVOTUI_NODE=node, PYTHONUNBUFFERED="1")
    Path(log).parent.mkdir(parents=True, exist_ok=True)  # a best-of-n run's log is inside its group's folder
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=_die_with_parent)
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if line.strip():
                queue.put((label, line.rstrip()))
        code = proc.wait()
    if code < 0:
        raise RunInterrupted(f"{label}: the run was killed by signal {-code}")
    return code


def run_ray(base: RunConfig, seeds: list[int], out: Path, address: str | None = None, quiet: bool = False,
            arms: list[str] | None = None, retries: int = RETRIES) -> list[dict]:
    """Like `compare.run_parallel`, with every unit a Ray task (see the module doc); returns the
    rows of OUT/compare.json. Each seed's control starts when its coevolve arm has ended."""
    ray = import_ray()
    from ray.exceptions import RayError
    from ray.util.queue import Empty, Queue

    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
    size = size_of(base)
    ray.init(address=address or None, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             logging_level="warning")
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        task = ray.remote(num_gpus=1 if gpus >= 1 else 0, num_cpus=0 if gpus >= 1 else 1, max_retries=retries,
                          retry_exceptions=[RunInterrupted])(run_arm)
        queue = Queue()
        if not quiet:
            where = f"cluster {address}" if address else "a local Ray instance"
            print(f"ray: {where}, {int(gpus)} GPU(s), {int(ray.cluster_resources().get('CPU', 0))} CPU(s); "
                  f"one {'GPU' if gpus >= 1 else 'CPU'} per run", flush=True)
        pending: dict = {}
        extras: dict[int, int] = {}
        codes: dict[str, int] = {}
        errors: dict[str, str] = {}

        def submit(u: Unit) -> None:
            if finished(u):  # compare run again over the same --out: kept as is
                return ended(u, "finished before")
            extra = extras.get(u.seed, 0) if u.arm == "control" else 0
            need = {"num_gpus": u.slots, "num_cpus": 0} if gpus >= 1 else {"num_gpus": 0, "num_cpus": u.slots}
            resume = ("--jobs", str(u.slots)) if u.population else ()
            ref = task.options(**need).remote(u.label, str(u.run_dir), unit_args(out, base_d, u, extra),
                                              str(u.log), queue, resume)
            pending[ref] = u

        def ended(u: Unit, how: str) -> None:
            if not quiet:
                print(f"{u.label:<20} {how}", flush=True)
            if u.arm == "coevolve" and "control" in arms:
                extras[u.seed] = _extra_tasks(base, out, u.seed)
                for c in units("control", u.seed, out, size):
                    submit(c)

        if "control" in arms and "coevolve" not in arms:  # check_arms saw each seed's coevolve finished
            for seed in seeds:
                ended(units("coevolve", seed, out, size)[0], "finished before")
        for seed in seeds:
            for arm in arms:
                if arm != "control":
                    for u in units(arm, seed, out, size, _slots(size, gpus)):
                        submit(u)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            _drain(queue, Empty, quiet)
            for ref in ready:
                u = pending.pop(ref)
                try:
                    codes[u.label] = ray.get(ref)
                    how = f"exit {codes[u.label]}"
                except RunInterrupted as e:  # still killed after every rerun
                    codes[u.label], how = -9, f"{e} (after {retries} reruns)"
                except RayError as e:  # the worker or node was lost after every rerun
                    errors[u.label] = how = f"lost after {retries} reruns: {_cause(e)}"
                ended(u, how)
        _drain(queue, Empty, quiet)
    finally:
        ray.shutdown()
    rows = [arm_row(arm, seed, out, extras.get(seed, 0) if arm == "control" else 0, codes, errors, size)
            for seed in seeds for arm in arms]
    return _write_rows(out, rows)


def _cause(error: Exception) -> str:
    """A Ray task error in one line: its first line names the task, its last the exception."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]}: {lines[-1]}"


def _slots(size: int, gpus: float) -> int:
    """A population task's GPUs (or CPUs): one a member, at most the cluster's GPUs; on CPUs its
    members train one at a time, as `evotui run --population` does there."""
    return max(1, min(size, int(gpus))) if gpus >= 1 else 1


def _drain(queue, empty, quiet: bool) -> None:
    """Print the runs' lines that arrived (each prefixed with its run's name)."""
    while True:
        try:
            label, line = queue.get_nowait()
        except empty:
            return
        if not quiet:
            print(f"{label:<20} {line}", flush=True)
