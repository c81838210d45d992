"""Do twins stay identical while many runs share each card? One table, one command.

    python3 benchmarks/gpu_twins.py [--steps 40] [--seeds 0,1,2] [--suites default,suite2]
                                    [--per-card 6] [--deadline 480] [--profile gpu] [--out DIR]
                                    [--runs DIR] [--set KEY=VALUE ...] [--mps]

For every suite and seed it runs, as parallel `evotui run --headless` processes:
static, static-dup (a second static run of the same config), static-expert, coevolve and
coevolve-expert (the arms of `evotui compare`, backend/tools/compare.py). With several GPUs
the suites get disjoint cards and each suite's runs are dealt over its cards in turn; where a
card holds fewer than `--per-card` runs, load runs (static, seeds 100+) fill it. Every run
holds `model.gpu_share` = 0.9 / (runs on its card) unless `--set model.gpu_share=...` says.

Then, per pair (static vs static-dup, coevolve vs static, coevolve-expert vs
static-expert): the steps both stored, the last step through which their training records
(loss, gradient norm, mean reward, entropy) are identical (`report_invariance.first_divergence`),
the step of the evolving run's first training-altering promotion, and whether the pair
holds: identical up to that promotion. Static pairs must be identical at every step.

At `--deadline` seconds the runs get SIGTERM (each stops at its next step boundary, state
saved) and the table covers the steps they stored; the same command again resumes the
stopped runs (finished ones are kept), so two device calls can reach `--steps`. Logs, configs
and table.txt go under $OUT when set, else under --out (default /tmp/gpu_twins); the run folders (checkpoints: too large
to bring back from the device) under --runs (default /tmp/gpu_twins_runs).

With `--mps` the runs share their cards through one private CUDA MPS daemon, as under
`evotui compare --mps`: the table then says whether twins stay identical under MPS.

Suites: default = the math datasets of the config; suite2 = gcd + decimal_chain_sum (as
docs/results/gpu-compare-h100x4-suite2-5seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.config import load_config, to_dict, to_toml  # noqa: E402
from backend.tools.compare import EVOLVING, _finished, arm_config, mps_daemon, visible_gpus  # noqa: E402
from backend.tools.report_invariance import alters_training, first_divergence  # noqa: E402

SUITES = {"default": [], "suite2": ["math.datasets=['gcd','decimal_chain_sum']"]}
ARMS = ("static", "static-dup", "static-expert", "coevolve", "coevolve-expert")
PAIRS = (("static", "static-dup"), ("coevolve", "static"), ("coevolve-expert", "static-expert"))
CARD_USE = 0.9
LOAD_SEED = 100


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--suites", default="default,suite2")
    p.add_argument("--per-card", type=int, default=6, help="runs per card at least (load runs fill it)")
    p.add_argument("--deadline", type=float, default=480.0, help="seconds before the runs are stopped")
    p.add_argument("--profile", default="gpu")
    p.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpu_twins")
    p.add_argument("--runs", default="/tmp/gpu_twins_runs", help="where the run folders go")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--mps", action="store_true", help="the runs share their cards through a private MPS daemon")
    a = p.parse_args(argv)
    a.seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    a.suites = [s.strip() for s in a.suites.split(",") if s.strip()]
    unknown = [s for s in a.suites if s not in SUITES]
    if unknown:
        p.error(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)}")
    return a


def plan(args: argparse.Namespace, gpus: list[str]) -> list[dict]:
    """Every run: suite, arm, seed, its card (None: no GPU) and its folder name."""
    groups = [gpus[i::len(args.suites)] for i in range(len(args.suites))] if len(gpus) >= len(args.suites) \
        else [gpus] * len(args.suites)
    runs = []
    for suite, cards in zip(args.suites, groups):
        mine = [{"suite": suite, "arm": arm, "seed": seed} for seed in args.seeds for arm in ARMS]
        for k, r in enumerate(mine):
            r["gpu"] = cards[k % len(cards)] if cards else None
        for card in cards:
            while sum(r["gpu"] == card for r in mine) < args.per_card:
                mine.append({"suite": suite, "arm": "load", "seed": LOAD_SEED + len(mine), "gpu": card})
        runs += mine
    for r in runs:
        r["name"] = f"{r['suite']}-{r['arm']}-s{r['seed']}"
    return runs


def share_for(runs: list[dict], sets: list[str]) -> float | None:
    """The card share of every run: 0.9 / the fullest card's runs (None: set by --set, or no GPU)."""
    if any(s.startswith("model.gpu_share=") for s in sets) or runs[0]["gpu"] is None:
        return None
    most = max(sum(o["gpu"] == r["gpu"] for o in runs) for r in runs)
    return round(CARD_USE / most, 3)


def write_config(out: Path, r: dict, args: argparse.Namespace, share: float | None) -> Path:
    sets = [*args.sets, *SUITES[r["suite"]], f"steps={args.steps}"]
    if share is not None:
        sets.append(f"model.gpu_share={share}")
    base = to_dict(load_config(None, [*sets, f"profile={args.profile}"]))
    arm = {"static-dup": "static", "load": "static"}.get(r["arm"], r["arm"])
    cfg = arm_config(base, arm, r["seed"])
    cfg.name = r["name"]
    f = out / "configs" / f"{r['name']}.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(to_toml(cfg))
    return f


def run_argv(run_dir: Path, cfgf: Path, arm: str) -> list[str] | None:
    """`evotui run --headless` arguments: a new run, `--resume` where one was stopped before (a
    second call of this script goes on from the steps the first stored), None where it finished."""
    if (run_dir / "run.db").exists():
        return None if _finished(run_dir) else ["--resume", str(run_dir)]
    mode = "--auto-promote" if arm in EVOLVING else "--supervised"
    return ["--config", str(cfgf), "--run-dir", str(run_dir), mode]


def launch(out: Path, runs: Path, r: dict, cfgf: Path, mps=None) -> subprocess.Popen | None:
    """`mps`: a running MpsDaemon (backend/mps.py) the run is served by, or None."""
    argv = run_argv(runs / r["name"], cfgf, r["arm"])
    if argv is None:
        return None
    env = dict(os.environ)
    if r["gpu"] is not None:
        env["CUDA_VISIBLE_DEVICES"] = r["gpu"]
        if mps is not None:
            env.update(mps.client_env([r["gpu"]]))  # the card as the daemon's server numbers it
    else:  # CPU runs side by side: one thread each, or OpenMP's spin-waits slow them all
        env.setdefault("OMP_NUM_THREADS", "1")
    log = open(out / "logs" / f"{r['name']}.log", "a")
    return subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", *argv],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_all(procs: dict[str, subprocess.Popen], deadline: float) -> dict[str, str]:
    """Wait for the runs; at the deadline SIGTERM each run (it stops at its next step boundary,
    state saved); 90 s later SIGKILL what is left, with its children (harness worker, sandbox)."""
    t0 = time.monotonic()
    while any(p.poll() is None for p in procs.values()) and time.monotonic() - t0 < deadline:
        time.sleep(2)
    stopped = {n: "finished" for n in procs}
    for n, p in procs.items():
        if p.poll() is None:
            stopped[n] = "stopped at the deadline"
            p.send_signal(signal.SIGTERM)
    t1 = time.monotonic()
    while any(p.poll() is None for p in procs.values()) and time.monotonic() - t1 < 90:
        time.sleep(1)
    for n, p in procs.items():
        if p.poll() is None:
            stopped[n] = "killed after the deadline"
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        elif p.returncode not in (0, None) and stopped[n] == "finished":
            stopped[n] = f"exit {p.returncode}"
    return stopped


def read_run(run_dir: Path) -> dict:
    """The run's per-step training records, batch shapes and promotions (empty if it never started)."""
    from backend.store import Store

    if not (run_dir / "run.db").exists():
        return {"steps": [], "shapes": {}, "promoted": []}
    s = Store.open(run_dir, readonly=True)
    try:
        steps = [dict(r) for r in s.step_series()]
        shapes = {r["step"]: json.loads(r["metrics_json"] or "{}") for r in s.step_metrics()}
        promoted = [dict(r) for r in s.promotions_with_backtests()]
    finally:
        s.close()
    return {"steps": steps, "shapes": shapes, "promoted": promoted}


def compare_pair(a: dict, b: dict) -> dict:
    """Steps both stored, the first divergence among them, the evolving run's first
    training-altering promotion, whether the pair holds, and both runs' batch shapes there."""
    common = {r["step"] for r in a["steps"]} & {r["step"] for r in b["steps"]}
    d = first_divergence([r for r in a["steps"] if r["step"] in common],
                         [r for r in b["steps"] if r["step"] in common])
    promos = sorted(p["promoted_step"] for p in a["promoted"] if alters_training(p) and p["promoted_step"] is not None)
    first = promos[0] if promos else None
    holds = d is None or (first is not None and first < d)
    shape = ""
    if d is not None:
        sa, sb = a["shapes"].get(d, {}), b["shapes"].get(d, {})
        shape = (f"mb {sa.get('micro_batch')}/{sb.get('micro_batch')}, "
                 f"gen {sa.get('gen_batch')}/{sb.get('gen_batch')}")
    return {"steps": max(common) if common else None, "diverged": d, "promotion": first, "holds": holds,
            "shape": shape}


def table(runs: list[dict], folder: Path, args: argparse.Namespace, status: dict[str, str]) -> list[str]:
    data = {r["name"]: read_run(folder / r["name"]) for r in runs if r["arm"] != "load"}
    lines = [f"{'suite':<8} {'seed':>4}  {'pair':<34} {'steps':>5}  {'identical through':<22} "
             f"{'first training promotion':<25} {'holds':<5}  shapes at the split (a/b)"]
    bad = 0
    for suite in args.suites:
        for seed in args.seeds:
            for a, b in PAIRS:
                ra, rb = data[f"{suite}-{a}-s{seed}"], data[f"{suite}-{b}-s{seed}"]
                c = compare_pair(ra, rb)
                if c["steps"] is None:
                    same = "no common step"
                elif c["diverged"] is None:
                    same = f"identical through {c['steps']}"
                else:
                    same = f"step {c['diverged'] - 1} (split {c['diverged']})"
                promo = "-" if a.startswith("static") else (f"step {c['promotion']}" if c["promotion"] is not None
                                                             else "none")
                bad += not c["holds"]
                lines.append(f"{suite:<8} {seed:>4}  {a + ' vs ' + b:<34} {c['steps'] or 0:>5}  {same:<22} "
                             f"{promo:<25} {'yes' if c['holds'] else 'NO':<5}  {c['shape']}")
    lines.append(f"pairs that break the invariant: {bad} of {len(args.suites) * len(args.seeds) * len(PAIRS)}")
    not_done = [f"{n}: {s}" for n, s in status.items() if s != "finished"]
    if not_done:
        lines.append("runs that did not finish: " + "; ".join(not_done))
    return lines


def main(argv: list[str]) -> int:
    args = parse(argv)
    out, folder = Path(args.out), Path(args.runs)
    for d in (out / "logs", out / "configs", folder):
        d.mkdir(parents=True, exist_ok=True)
    gpus = visible_gpus()
    runs = plan(args, gpus)
    share = share_for(runs, args.sets)
    cards = {g: sum(r["gpu"] == g for r in runs) for g in sorted({r["gpu"] for r in runs}, key=str)}
    print(f"{len(runs)} runs, {args.steps} steps, profile {args.profile}; runs per card {cards}; "
          f"gpu_share {share if share is not None else 'as set / none'}", flush=True)
    with mps_daemon(args.mps, gpus) as mps:
        started = {r["name"]: launch(out, folder, r, write_config(out, r, args, share), mps) for r in runs}
        procs = {n: p for n, p in started.items() if p is not None}  # None: finished in an earlier call
        t0 = time.monotonic()
        status = {**{n: "finished" for n in started}, **wait_all(procs, args.deadline)}
    print(f"runs done after {time.monotonic() - t0:.0f} s", flush=True)
    lines = table(runs, folder, args, status)
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
