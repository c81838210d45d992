"""`evotui compare --ray [ADDRESS]`: the compare grid as Ray tasks, one arm x seed each.

Each run is a Ray task that starts `evotui run --headless` for its arm (the
same arguments `--jobs` uses, `compare.run_args`) on the node Ray places it:
one GPU per task where the cluster has GPUs (Ray sets CUDA_VISIBLE_DEVICES),
one CPU otherwise. The run's output goes to OUT/ARM-sSEED.log and, line by
line, through a Ray queue to this process, which prints it prefixed with the
run's name. A task whose worker is lost (the node or the Ray worker dies, or
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

from .compare import ARMS, _extra_tasks, _finished, _row, _write_rows, check_arms, run_args

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


def run_arm(label: str, run_dir: str, new_args: list[str], log: str, queue) -> int:
    """The Ray task: run (or resume) one arm's run to its end; returns its exit code.

    Raises RunInterrupted when the run was killed by a signal, so Ray reruns the task."""
    import ray

    resuming = (Path(run_dir) / "run.db").exists()
    args = ["--resume", run_dir] if resuming else new_args
    gpu_ids = ray.get_gpu_ids()
    node = socket.gethostname() + (f" GPU {','.join(str(g) for g in gpu_ids)}" if gpu_ids else "")
    queue.put((label, f"{'resuming' if resuming else 'started'} on {node}"))
    env = dict(os.environ, EVOTUI_NODE=node, PYTHONUNBUFFERED="1")
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
    """Like `compare.run_parallel`, with every run a Ray task (see the module doc); returns the
    rows of OUT/compare.json. Each seed's control starts when its coevolve arm has ended."""
    ray = import_ray()
    from ray.exceptions import RayError
    from ray.util.queue import Empty, Queue

    arms = arms or list(ARMS)
    check_arms(base, arms, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    base_d = to_dict(base)
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
        pending, extras, codes, errors = {}, {}, {}, {}

        def submit(arm: str, seed: int) -> None:
            label = f"{arm}-s{seed}"
            if _finished(out / label):  # compare run again over the same --out: kept as is
                return ended(arm, seed, "finished before")
            extra = extras.get(seed, 0) if arm == "control" else 0
            ref = task.remote(label, str(out / label), run_args(out, base_d, arm, seed, extra),
                              str(out / f"{label}.log"), queue)
            pending[ref] = (arm, seed)

        def ended(arm: str, seed: int, how: str) -> None:
            if not quiet:
                print(f"{arm + '-s' + str(seed):<20} {how}", flush=True)
            if arm == "coevolve" and "control" in arms:
                extras[seed] = _extra_tasks(base, out, seed)
                submit("control", seed)

        if "control" in arms and "coevolve" not in arms:  # check_arms saw each seed's coevolve finished
            for seed in seeds:
                ended("coevolve", seed, "finished before")
        for seed in seeds:
            for arm in arms:
                if arm != "control":
                    submit(arm, seed)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            _drain(queue, Empty, quiet)
            for ref in ready:
                arm, seed = pending.pop(ref)
                try:
                    codes[(arm, seed)] = ray.get(ref)
                    how = f"exit {codes[(arm, seed)]}"
                except RunInterrupted as e:  # still killed after every rerun
                    codes[(arm, seed)], how = -9, f"{e} (after {retries} reruns)"
                except RayError as e:  # the worker or node was lost after every rerun
                    errors[(arm, seed)] = how = f"lost after {retries} reruns: {str(e).strip().splitlines()[0]}"
                ended(arm, seed, how)
        _drain(queue, Empty, quiet)
    finally:
        ray.shutdown()
    rows = [_row(arm, seed, out / f"{arm}-s{seed}", extras.get(seed, 0) if arm == "control" else 0,
                 codes.get((arm, seed)), errors.get((arm, seed))) for seed in seeds for arm in arms]
    return _write_rows(out, rows)


def _drain(queue, empty, quiet: bool) -> None:
    """Print the runs' lines that arrived (each prefixed with its run's name)."""
    while True:
        try:
            label, line = queue.get_nowait()
        except empty:
            return
        if not quiet:
            print(f"{label:<20} {line}", flush=True)
