"""How long a stop takes on a real run, in each phase of the engine.

    python benchmarks/stop_latency.py                      # every phase, by command and by SIGTERM
    python benchmarks/stop_latency.py --phases generate,train --ways command
    python benchmarks/stop_latency.py --set model.engine=fast   # another engine (any --set is passed on)

It runs the real engine (`evotui run --headless`, the embedded model, the CPU
default config) in a fresh run directory. For each phase (a held-out
evaluation, generation, training, an evolution round) and each way of
stopping, it starts the run (or resumes it), waits until the run's activity
says the engine is in that phase and `--into` seconds have passed, then stops
it: through the command table exactly as the TUI does (`backend.commands.check`
then a `stop` row), or with SIGTERM. It prints, per case, the seconds from the
stop to the run's `stopped` status and to the process's exit, and whether the
state was saved: status `stopped`, the database's integrity check, steps 1..N
each committed once, the newest policy version's checkpoint on disk, the stop
command acknowledged. The next case resumes the same run, so every resume is
checked too. Nothing here is asserted by the test suite.

The same command runs on a CUDA machine: the run gets the `gpu` profile there
(`--profile auto`, backend/profiles.py), and so do this script's defaults
(`DEFAULTS`, the same rule: `profiles.resolve("auto")`). On the CPU two
settings differ from the run's default, to reach every phase in minutes:
`evolve.every=1` (a round after every step) and held-out sets of 16 + 16
(`eval.n_val`, `eval.n_test`); neither changes how a phase is interrupted (a
held-out batch is 16 problems on the CPU either way). On a GPU a step takes
seconds: the profile's held-out sets stay (200 + 500 problems, long enough to be
caught in the middle), the stop comes 0.2 s into a phase, and the run is long
enough never to finish while the cases resume it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from backend.commands import check  # noqa: E402
from backend.profiles import resolve  # noqa: E402
from backend.store import Store  # noqa: E402

PHASES = {
    # phase -> what the run's activity starts with / contains while the engine is in it
    "held-out eval": lambda a: a.startswith("held-out eval"),
    "generate": lambda a: a.startswith("step ") and a.endswith(": generate"),
    "train": lambda a: a.startswith("step ") and a.endswith(": train"),
    "round": lambda a: a.startswith("round at step"),
}
WAYS = ("command", "sigterm")
DEFAULTS = {  # per profile of the run: --set overrides, --into, --steps
    "cpu": {"sets": ["evolve.every=1", "eval.n_val=16", "eval.n_test=16"], "into": 1.0, "steps": 20},
    "gpu": {"sets": ["evolve.every=1"], "into": 0.2, "steps": 1000},
}
POLL_S = 0.05


@dataclass
class Case:
    phase: str
    way: str
    activity: str = ""
    to_stopped_s: float | None = None
    to_exit_s: float | None = None
    saved: str = ""
    last_step: int = 0


def evotui() -> list[str]:
    exe = Path(sys.executable).with_name("evotui")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "evotui"]


def launch(run_dir: Path, steps: int, sets: list[str], log) -> subprocess.Popen:
    """Start the run, or resume it when it exists."""
    if (run_dir / "run.db").exists():
        args = ["run", "--headless", "--quiet", "--resume", str(run_dir)]
    else:
        args = ["run", "--headless", "--quiet", "--run-dir", str(run_dir), "--steps", str(steps)]
        for s in sets:
            args += ["--set", s]
    return subprocess.Popen(evotui() + args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def run_row(run_dir: Path) -> dict | None:
    if not (run_dir / "run.db").exists():
        return None
    store = Store.open(run_dir / "run.db", create=False)
    try:
        return store.run()
    finally:
        store.close()


def wait_for_phase(proc: subprocess.Popen, run_dir: Path, phase: str, into_s: float, timeout_s: float) -> str:
    """Block until the run has been in `phase` for `into_s` seconds; return its activity then."""
    seen_at = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run exited (code {proc.returncode}) before reaching '{phase}'")
        row = run_row(run_dir) or {}
        act = row.get("activity") or ""
        if row.get("status") == "running" and PHASES[phase](act):
            seen_at = seen_at or time.monotonic()
            if time.monotonic() - seen_at >= into_s:
                return act
        else:
            seen_at = None
        time.sleep(POLL_S)
    raise RuntimeError(f"the run did not reach '{phase}' within {timeout_s:.0f} s")


def send_stop(proc: subprocess.Popen, run_dir: Path, way: str) -> None:
    if way == "sigterm":
        proc.send_signal(signal.SIGTERM)
        return
    store = Store.open(run_dir / "run.db", create=False)
    try:  # what the TUI's S does: the one check, then the command row
        store.send_command("stop", check("stop", {}, store.run()), source="tui")
    finally:
        store.close()


def wait_stopped(proc: subprocess.Popen, run_dir: Path, t0: float, timeout_s: float) -> tuple[float | None, float]:
    """(seconds to the `stopped` status, seconds to the process's exit)."""
    stopped = None
    deadline = t0 + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if stopped is None and (run_row(run_dir) or {}).get("status") == "stopped":
            stopped = time.monotonic() - t0
        time.sleep(POLL_S)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    exit_s = time.monotonic() - t0
    if stopped is None and (run_row(run_dir) or {}).get("status") == "stopped":
        stopped = exit_s
    return stopped, exit_s


def saved_state(run_dir: Path, way: str) -> tuple[str, int]:
    """("yes" or what is wrong, the last committed step)."""
    store = Store.open(run_dir / "run.db", create=False)
    try:
        problems = []
        run = store.run()
        if run["status"] != "stopped":
            problems.append(f"status {run['status']}")
        if store.scalar("PRAGMA integrity_check") != "ok":
            problems.append("integrity_check failed")
        steps = [r["step"] for r in store.rows("SELECT step FROM steps ORDER BY step")]
        if steps != list(range(1, len(steps) + 1)):
            problems.append(f"steps {steps}")
        pv = store.latest_policy_version()
        if pv and pv["checkpoint"] and not Path(pv["checkpoint"]).exists():
            problems.append("newest checkpoint missing")
        if way == "command":
            stops = store.rows("SELECT status FROM commands WHERE verb = 'stop' ORDER BY id DESC LIMIT 1")
            if not stops or stops[0]["status"] != "applied":
                problems.append(f"stop command {stops[0]['status'] if stops else 'missing'}")
        return ("yes" if not problems else "no: " + "; ".join(problems)), store.last_step()
    finally:
        store.close()


def measure(run_dir: Path, phase: str, way: str, args, log) -> Case:
    case = Case(phase, way)
    proc = launch(run_dir, args.steps, args.sets, log)
    try:
        case.activity = wait_for_phase(proc, run_dir, phase, args.into, args.reach_timeout)
        t0 = time.monotonic()
        send_stop(proc, run_dir, way)
        case.to_stopped_s, case.to_exit_s = wait_stopped(proc, run_dir, t0, args.stop_timeout)
        case.saved, case.last_step = saved_state(run_dir, way)
    except RuntimeError as e:
        case.saved = f"not measured: {e}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return case


def fmt(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def table(cases: list[Case]) -> str:
    lines = ["| phase | stopped by | activity when sent | to `stopped` (s) | to exit (s) | state saved | last step |",
             "|---|---|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c.phase} | {c.way} | {c.activity} | {fmt(c.to_stopped_s)} | {fmt(c.to_exit_s)} | "
                     f"{c.saved} | {c.last_step} |")
    return "\n".join(lines)


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of: {', '.join(PHASES)}")
    ap.add_argument("--ways", default=",".join(WAYS), help="command, sigterm or both")
    ap.add_argument("--run-dir", type=Path, help="where the run lives (default: a new temporary folder)")
    ap.add_argument("--steps", type=int, help="the run's steps; it never gets near the end (default: DEFAULTS)")
    ap.add_argument("--set", dest="sets", action="append", default=None,
                    help="config override for the run (default: DEFAULTS for the machine's profile)")
    ap.add_argument("--into", type=float, help="seconds into the phase before the stop is sent (default: DEFAULTS)")
    ap.add_argument("--reach-timeout", type=float, default=1200, help="seconds to wait for a phase")
    ap.add_argument("--stop-timeout", type=float, default=300, help="seconds to wait for the stop")
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    bad = [p for p in phases if p not in PHASES] + [w for w in ways if w not in WAYS]
    if bad:
        ap.error(f"unknown phase or way: {', '.join(bad)}")
    profile = resolve("auto")  # what `evotui run` picks on this machine
    defaults = DEFAULTS[profile]
    args.sets = defaults["sets"] if args.sets is None else args.sets
    args.into = defaults["into"] if args.into is None else args.into
    args.steps = defaults["steps"] if args.steps is None else args.steps
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="stop-latency-")) / "run"
    print(f"run dir {run_dir}; profile {profile}; settings: {' '.join(args.sets)}; stop {args.into} s into a "
          f"phase; {load()}", flush=True)
    cases = []
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.engine.out", "ab") as log:
        for phase in phases:
            for way in ways:
                case = measure(run_dir, phase, way, args, log)
                print(f"{case.phase:>14} {case.way:>8}: stopped after {fmt(case.to_stopped_s)} s, exit "
                      f"{fmt(case.to_exit_s)} s, saved {case.saved} ({case.activity}; {load()})", flush=True)
                cases.append(case)
    print(table(cases))
    print(f"at the end: {load()}")
    return 0 if all(c.saved == "yes" for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
