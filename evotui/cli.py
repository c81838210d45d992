"""The `evotui` command line. Never imports torch at module level.

    evotui                          open the TUI and start a new run (supervised)
    evotui run --headless [...]     run the engine in the foreground
    evotui run --headless --resume RUN_DIR
    evotui open RUN_DIR             attach the TUI to a run
    evotui runs                     list runs with status, step, held-out accuracy
    evotui approve RUN ID [--inconclusive] / veto RUN ID --reason TEXT
    evotui skills list|show|export|import
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backend import profiles
from backend.errors import EvoError, UsageError

SHELL_BUSY_S = 10.0
"""How long a shell command (approve, pause, ...) waits for a run database another process has locked."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evotui", description="Co-evolve an LLM policy and its RL harness. Bare `evotui` starts a new "
        "run (supervised) in a background process and opens the TUI on it; it takes run's options "
        "(`evotui --steps 60`), which `evotui run --help` lists.")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="start (or resume) a run")
    r.add_argument("--headless", action="store_true", help="run in the foreground without the TUI")
    r.add_argument("--steps", type=int, help="training steps of the run (config key steps)")
    r.add_argument("--config", help="TOML config file (see README, Configuration)")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value (repeatable), e.g. --set train.group_size=8")
    r.add_argument("--run-dir", help="where the run lives (default: a new folder under $EVOTUI_HOME/runs)")
    r.add_argument("--seed", type=int, help="the run's seed (config key seed)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped or crashed run")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--auto-promote", action="store_true", help="promote passed interventions automatically")
    mode.add_argument("--supervised", action="store_true", help="hold passed interventions for the operator")
    r.add_argument("--quiet", action="store_true", help="no progress bar or per-step lines")
    r.add_argument("--population", type=int, metavar="N", help="train a population of N runs side by side, "
                   "compared every population.every steps (config key population.size; headless)")
    r.add_argument("--population-mode", choices=("explore", "copy"), help="explore: a member behind copies a "
                   "better one and takes one harness move; copy: it only copies (config key population.mode)")
    r.add_argument("--jobs", type=int, help="population members training at once (default: all on GPUs, 1 on CPU)")
    r.add_argument("--gpus", metavar="N|auto", help="data-parallel over N GPUs of this host, or every visible "
                   "one (auto); on the CPU N gloo processes (config key train.gpus; 0 = auto)")
    _report_to_arg(r)
    _profile_arg(r)
    o = sub.add_parser("open", help="open a run in the TUI")
    o.add_argument("run_dir", help="the run directory (running, stopped or finished), or a population directory")
    sub.add_parser("runs", help="list runs")
    for verb in ("approve", "veto"):
        c = sub.add_parser(verb, help=f"{verb} an intervention of a run (checked at once, applied by the "
                           "engine between two steps)")
        c.add_argument("run_dir", help="the run directory, or a population directory (its moves)")
        c.add_argument("id", type=int, help="the intervention's number (evotui open RUN_DIR, screen 4), or a "
                       "population's move number (evotui open POP)")
        if verb == "veto":
            c.add_argument("--reason", required=True, help="why (required; recorded with the intervention)")
        else:
            c.add_argument("--inconclusive", action="store_true",
                           help="approve an inconclusive candidate (its interval does not clear min_gain)")
            c.add_argument("--rebase", action="store_true",
                           help="for a candidate built on an older harness version: re-apply its change onto "
                           "the active version and backtest it again before promoting it")
    for verb, what in (("pause", "pause a running engine at its next checkpoint"),
                       ("resume", "resume a paused engine"),
                       ("stop", "stop a running engine at its next checkpoint (state saved; --resume goes on)")):
        c = sub.add_parser(verb, help=what)
        c.add_argument("run_dir", help="the run directory")
    s = sub.add_parser("skills", help="the skill library")
    s.add_argument("action", choices=["list", "show", "export", "import"], help="what to do with the library")
    s.add_argument("args", nargs="*", help="show: RUN NAME; list: [RUN]; export: RUN PATH; import: RUN PATH")
    cmp_ = sub.add_parser("compare", help="static and expert harnesses, with and without co-evolution, and a "
                          "budget-matched control, over several seeds")
    cmp_.add_argument("--config", help="TOML config file shared by every arm")
    cmp_.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value of every arm (repeatable)")
    cmp_.add_argument("--steps", type=int, help="training steps of each run")
    cmp_.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    cmp_.add_argument("--out", help="folder for the arms' runs and the report (default under $EVOTUI_HOME)")
    cmp_.add_argument("--jobs", type=int, default=1,
                      help="runs as parallel processes; with several GPUs visible, each run pinned to one")
    cmp_.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                      help="each run a Ray task with one GPU (one CPU without GPUs), rerun from its checkpoint "
                      "if its worker is lost; ADDRESS: a cluster (ray://HOST:10001, HOST:6379 or auto), none: a "
                      "local Ray instance over this host (pip install 'evotui[ray]')")
    cmp_.add_argument("--mps", action="store_true",
                      help="with --jobs N: runs sharing a card run their kernels at once through a private CUDA MPS "
                      "daemon (twin runs stay bit-identical under it; its throughput, measured with length buckets "
                      "and causal attention: docs/gpus.md)")
    cmp_.add_argument("--arms", help="comma-separated arms to run (default: all of static, static-expert, "
                      "coevolve, coevolve-expert, control; also: population, population-copy, best-of-n)")
    cmp_.add_argument("--population", type=int, metavar="N",
                      help="members of each population arm and runs of best-of-n (default 4; config key "
                      "population.size)")
    cmp_.add_argument("--quiet", action="store_true", help="no per-step lines")
    cmp_.add_argument("--include-incomplete", action="store_true",
                      help="count arms that did not finish all their steps in the report's means")
    _report_to_arg(cmp_)
    _profile_arg(cmp_)
    rep = sub.add_parser("report", help="write a Markdown report with plots for runs")
    rep.add_argument("runs", nargs="+", help="run directories, or a compare folder")
    rep.add_argument("--out", help="report folder (default: RUN/report, COMPARE_DIR/report; for several "
                     "runs, a report-N-runs-HASH folder beside the first)")
    rep.add_argument("--include-incomplete", action="store_true",
                     help="count runs that did not finish all their steps in the means")
    exp = sub.add_parser("export", help="write a run's rollouts (with diagnoses and verdicts) as a dataset, "
                         "or its trained policy as a model (--policy)")
    exp.add_argument("run_dir", help="the run directory")
    exp.add_argument("--format", choices=("jsonl", "parquet"),
                     help="rollouts: jsonl (the default, needs nothing) or parquet (needs pyarrow); both load "
                     "with `datasets`")
    exp.add_argument("--policy", action="store_true",
                     help="write the trained policy instead: the LoRA adapter merged into the base model, a "
                     "folder transformers loads (AutoModelForCausalLM.from_pretrained)")
    exp.add_argument("--step", type=int, help="with --policy: the policy this step saved (default: the one "
                     "the run trains now)")
    exp.add_argument("--dtype", choices=("float32", "bfloat16"),
                     help="with --policy: the weights' type (default float32; bfloat16 is half the size)")
    exp.add_argument("--out", help="output file (default: RUN_DIR/export/rollouts.FORMAT), or with --policy "
                     "the model folder (default: RUN_DIR/export/policy-step-N)")
    sub.add_parser("doctor", help="which fast paths are active and why not the others")
    b = sub.add_parser("bench", help="speed benchmarks against baselines (prints a table)")
    b.add_argument("--quick", action="store_true", help="small sizes, a quick look")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="options passed on to the benchmark")
    return p


def _report_to_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-to", metavar="SINKS", help="also send per-step metrics to tensorboard, trackio "
                   "and/or wandb (comma-separated; off by default; config key report_to)")


def _report_to_sets(args) -> list[str]:
    return [f"report_to={args.report_to}"] if getattr(args, "report_to", None) else []


def _gpus_sets(args) -> list[str]:
    """`--gpus N|auto` as the override `train.gpus=N` (auto: 0)."""
    g = getattr(args, "gpus", None)
    if g is None:
        return []
    if g != "auto" and not (g.isdigit() and int(g) >= 1):
        raise UsageError(f"--gpus expects a positive count or auto, got '{g}'")
    return [f"train.gpus={0 if g == 'auto' else int(g)}"]


def _profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=profiles.CHOICES,
                   help="defaults scaled to the machine (backend/profiles.py); auto (the default): gpu when "
                   "CUDA is available, else cpu; gpu-fast: gpu with the measured speed settings. Config-file "
                   "and --set values win")


def _profile_sets(args) -> list[str]:
    """The `profile=` override for a new run: --profile if given; else none when the config file
    or --set names one (a compare's per-arm config does); else auto."""
    if args.profile:
        return [f"profile={args.profile}"]
    if any(x.split("=", 1)[0].strip() == "profile" for x in args.sets):
        return []
    if args.config:
        import tomllib

        try:
            if "profile" in tomllib.loads(Path(args.config).expanduser().read_text()):
                return []
        except (OSError, ValueError):
            pass  # load_config reports a missing or broken file
    return ["profile=auto"]


def bench_args(argv: list[str]) -> tuple[bool, list[str]]:
    """(`--quick`, the benchmark's own flags in the order given). argparse cannot split these:
    `bench --only ddp --gpus 2` reached the benchmark as `ddp --gpus 2 --only`."""
    return "--quick" in argv, [a for a in argv if a not in ("--quick", "--")]


def wants_help(argv: list[str]) -> bool:
    """-h or --help among a command's own flags (those before a `--`)."""
    own = argv[:argv.index("--")] if "--" in argv else argv
    return "-h" in own or "--help" in own


def bench_help() -> str:
    """`evotui bench --help` without importing the benchmark (it imports torch at once): its
    docstring and its flags, read from its source."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("backend.tools.bench")
    tree = ast.parse(Path(spec.origin).read_text())
    flags = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
            flag = node.args[0].value if isinstance(node.args[0], ast.Constant) else "?"
            helps = [k.value.value for k in node.keywords if k.arg == "help" and isinstance(k.value, ast.Constant)]
            flags.append(f"  {flag:<20} {helps[0] if helps else ''}".rstrip())
    return "\n".join(["usage: evotui bench [--quick] [OPTIONS]", "", ast.get_docstring(tree) or "", "",
                      "options:", "  --quick              small CPU sizes, a quick look", *flags])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"] and wants_help(argv[1:]):
        print(bench_help())
        return 0
    if argv[:1] == ["bench"]:  # bench takes its own flags (--only, --model, ...), passed on in order
        args = _parser().parse_args(["bench"])
        args.quick, args.rest = bench_args(argv[1:])
    else:
        if argv[:1] and argv[0].startswith("-") and not wants_help(argv[:1]):
            argv = ["run", *argv]  # bare `evotui --steps 60` takes run's options, as its help says
        args = _parser().parse_args(argv)
        args.argv = argv
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        again = ("the same command again resumes its unfinished arms" if args.cmd == "compare"
                 else "resume with `evotui run --headless --resume RUN_DIR`")
        print(f"interrupted; {again}", file=sys.stderr)
        return 130
    except EvoError as e:  # a mistake the user can fix, or a clean stop: one line, exit 2 (stopped: 3)
        print(e.cli_line(), file=sys.stderr)
        return e.exit_code
    except Exception as e:
        if isinstance(e, OSError):  # a path, a disk
            print(f"evotui: error: {e}", file=sys.stderr)
            return 2
        if os.environ.get("EVOTUI_DEBUG"):
            raise
        print(f"evotui: crashed: {type(e).__name__}: {e} (set EVOTUI_DEBUG=1 for the traceback; "
              "the run's events table has it)", file=sys.stderr)
        return 1


def _dispatch(args) -> int:
    if args.cmd is None:
        return _tui_new_run([])
    if args.cmd == "run":
        return _run(args)
    if args.cmd == "open":
        if _population_dir(args.run_dir):
            from evotui.components.population_app import PopulationApp
            from evotui.launch import require_terminal

            require_terminal(f"read the population without it: evotui report {args.run_dir}")
            return PopulationApp(_population_dir(args.run_dir)).run() or 0
        from evotui.launch import open_tui

        return open_tui(_run_dir(args.run_dir))
    if args.cmd == "runs":
        return _runs()
    if args.cmd in ("approve", "veto", "pause", "resume", "stop"):
        return _command(args)
    if args.cmd == "skills":
        from evotui.skills_cli import skills

        return skills(args.action, args.args)
    if args.cmd == "compare":
        return _compare(args)
    if args.cmd == "report":
        return _report(args)
    if args.cmd == "export":
        return _export(args)
    if args.cmd == "doctor":
        from backend.tools.doctor import main as doctor

        return doctor()
    if args.cmd == "bench":
        from backend.tools.bench import main as bench

        return bench(args.rest, quick=args.quick)
    return 2


def _population_dir(path: str) -> Path | None:
    """The population directory `path` names (it holds population.sqlite), else None."""
    p = Path(path).expanduser()
    return p if (p / "population.sqlite").is_file() else None


def _run_dir(path: str) -> Path:
    p = Path(path).expanduser()
    if not (p / "run.db").is_file():
        raise UsageError(f"not an evotui run directory: {p} (no run.db)")
    return p


def _run(args) -> int:
    if not args.headless and (args.population or args.population_mode):
        raise UsageError("a population runs headless: add --headless")
    if not args.headless:
        extra = [a for a in args.argv[1:] if a not in ("--headless",)]
        if args.resume:
            from evotui.launch import open_tui

            return open_tui(_run_dir(args.resume))
        return _tui_new_run(extra)
    with sigterm_interrupts():
        return _headless(args)


def _headless(args) -> int:
    from backend import runs

    if args.resume and (Path(args.resume).expanduser() / "population.sqlite").is_file():
        return _population(args, None)
    if args.resume:
        sets = list(args.sets) + _report_to_sets(args) + _gpus_sets(args)
        if args.seed is not None:  # the run's own seed again is no change (backend/config.RESUME_FIXED)
            sets.append(f"seed={args.seed}")
        if args.auto_promote or args.supervised:
            sets.append(f"evolve.auto_promote={'true' if args.auto_promote else 'false'}")
        run_dir, s = runs.resume(_run_dir(args.resume), args.steps, sets or None, quiet=args.quiet,
                                 own_process=True)
    else:
        sets = list(args.sets) + _report_to_sets(args) + _gpus_sets(args)
        # Headless runs are autonomous unless told otherwise; the TUI starts them supervised.
        sets.append(f"evolve.auto_promote={'false' if args.supervised else 'true'}")
        cfg = runs.load_cli_config(args.config, sets + _profile_sets(args) + _population_sets(args), args.steps,
                                   args.seed)
        if cfg.population.size:
            return _population(args, cfg)
        if args.jobs is not None:
            raise UsageError("--jobs is for a population of runs (--population N)")
        if cfg.profile:
            from backend.profiles import describe

            print(describe(cfg.profile), flush=True)
        run_dir, s = runs.start(cfg, Path(args.run_dir).expanduser() if args.run_dir else None, quiet=args.quiet,
                                own_process=True)
    from backend.end_summary import end_summary

    print(end_summary(run_dir, s.get("wall_s")), flush=True)
    return 0 if s["status"] in ("finished", "stopped") else 1


def _population_sets(args) -> list[str]:
    if args.population is not None and args.population < 2:
        raise UsageError(f"--population expects at least 2 members, got {args.population}")
    return ([f"population.size={args.population}"] if args.population is not None else []) + \
        ([f"population.mode='{args.population_mode}'"] if args.population_mode else [])


def _population(args, cfg) -> int:
    """`evotui run --headless --population N` (cfg: its config), or `--resume POP` (cfg None)."""
    from backend import runs
    from backend.population import coordinator

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs expects at least 1, got {args.jobs}")
    if cfg is None:
        out = coordinator.resume(Path(args.resume).expanduser(), args.steps, args.jobs or 0, quiet=args.quiet)
    else:
        pop_dir = Path(args.run_dir).expanduser() if args.run_dir else runs.new_run_dir(cfg)
        out = coordinator.start(cfg, pop_dir, args.jobs or 0, quiet=args.quiet)
    print(coordinator.end_line(out), flush=True)
    return 0 if out["status"] in ("finished", "stopped") else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside it, SIGTERM acts as Ctrl-C until a run's loop installs its own handler: one line and
    exit 130 (`main`), and a run directory being created is removed (`runs.create_run`). The
    default action killed the process wherever it was: a compare stopped at a deadline left a
    half-made `.NAME.creating-PID`. In the loop SIGTERM stops the run at its next
    step boundary with its state saved (backend/loop.py). The handler before it comes back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _tui_new_run(extra: list[str]) -> int:
    from backend.config import load_config
    from evotui.launch import start_and_open

    # Validate what we can before starting a background process.
    ns = _parser().parse_args(["run", *extra])
    load_config(ns.config, ns.sets)
    if ns.run_dir:
        run_dir = Path(ns.run_dir).expanduser()
    else:
        from backend.runs import runs_root  # torch-free import
        from datetime import datetime

        run_dir = runs_root() / f"{datetime.now():%Y%m%d-%H%M%S}-tui"
    args = [a for a in extra if a != "--run-dir" and a != ns.run_dir]
    if "--auto-promote" not in args and "--supervised" not in args:
        args.append("--supervised")
    return start_and_open(run_dir, args)


def _runs() -> int:
    from backend.runs import list_runs, runs_root

    rows = list_runs()
    if not rows:
        print(f"no runs under {runs_root()}")
        return 0
    from backend.disk import human_bytes

    print(f"{'status':<10} {'step':>9} {'test acc':>8} {'size':>9}  {'domain':<6} {'device':<10} dir")
    for r in rows:
        step = f"{r['step']}/{r['steps_total']}" if r["step"] is not None else "-"
        acc = f"{r['heldout_acc']:.3f}" if r["heldout_acc"] is not None else "-"
        print(f"{r['status']:<10} {step:>9} {acc:>8} {human_bytes(r['bytes']):>9}  {r['domain'] or '-':<6} "
              f"{r.get('device') or '-':<10} {r['dir']}")
    return 0


def _command(args) -> int:
    """approve / veto / pause / resume / stop: checked now, as the TUI checks them
    (`backend.commands.check`), then queued for the engine."""
    from backend.commands import check
    from backend.store import Store

    if args.cmd in ("approve", "veto") and _population_dir(args.run_dir):
        return _population_decision(args)
    store = Store.open(_run_dir(args.run_dir), create=False, busy_s=SHELL_BUSY_S)
    try:
        arg: dict = {}
        row = None
        if args.cmd in ("approve", "veto"):
            row = store.get("interventions", args.id)
            arg = {"id": args.id, "reason": args.reason} if args.cmd == "veto" else \
                {"id": args.id, "inconclusive": args.inconclusive, "rebase": args.rebase}
        arg = check(args.cmd, arg, store.run(), row)  # CommandRefused: one line, exit 2
        _engine_takes(args.cmd, store.run(), args.run_dir)
        cid = store.send_command(args.cmd, arg, source="cli")
    finally:
        store.close()
    when = "at its next checkpoint" if args.cmd in ("pause", "stop") else "between two steps"
    print(f"command {cid} queued: {args.cmd}; the engine applies it {when}")
    return 0


def _engine_takes(verb: str, run: dict, run_dir: str) -> None:
    """A pause, resume or stop is for a live engine: where the run's says it runs but its process
    is gone (killed, crashed without a word), none would take it (the next start expires it)."""
    from backend.commands import CONTROL_VERBS
    from backend.runs import pid_alive

    if verb in CONTROL_VERBS and run.get("status") in ("running", "paused") and run.get("pid") \
            and not pid_alive(run["pid"]):
        raise UsageError(f"the run's engine is not running (process {run['pid']} is gone: it crashed or was "
                         f"killed); nothing to {verb}: evotui run --headless --resume {run_dir} starts it again")


def _population_decision(args) -> int:
    """approve / veto POP ID: a pending explore move of a supervised population (the coordinator
    applies an approved one at its next segment boundary)."""
    from backend.population import decisions

    if args.cmd == "approve" and (args.inconclusive or args.rebase):
        raise UsageError("--inconclusive and --rebase are for a run's interventions, not a population's moves")
    pop = _population_dir(args.run_dir)
    print((decisions.approve if args.cmd == "approve" else decisions.veto)(pop, args.id))
    return 0


def _compare(args) -> int:
    from datetime import datetime

    from backend import runs
    from backend.profiles import describe
    from backend.tools.compare import failures, parse_arms, run_compare, run_parallel
    from backend.tools.report import write_report

    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--seeds expects comma-separated integers, got '{args.seeds}'") from None
    arms = parse_arms(args.arms)
    if args.mps and (args.ray is not None or args.jobs < 2):
        raise UsageError("--mps shares the cards between the parallel runs of --jobs N (N > 1)"
                         + ("; not with --ray" if args.ray is not None else ""))
    if args.population is not None and args.population < 2:
        raise UsageError(f"--population: a population has at least 2 members, got {args.population}")
    pop = [f"population.size={args.population}"] if args.population else []
    cfg = runs.load_cli_config(args.config, args.sets + pop + _report_to_sets(args) + _profile_sets(args),
                               args.steps, None)
    if cfg.profile:
        print(describe(cfg.profile), flush=True)
    out = Path(args.out).expanduser() if args.out else runs.home() / "compare" / f"{datetime.now():%Y%m%d-%H%M%S}"
    if args.ray is not None:
        if args.jobs > 1:
            raise UsageError("--ray and --jobs are two ways to spread the runs; give one")
        from backend.tools.compare_ray import run_ray

        rows = run_ray(cfg, seeds, out, args.ray or None, quiet=args.quiet, arms=arms)
    elif args.jobs > 1:
        rows = run_parallel(cfg, seeds, out, args.jobs, quiet=args.quiet, arms=arms, mps=args.mps)
    else:
        rows = run_compare(cfg, seeds, out, quiet=args.quiet, arms=arms)
    from backend.tools.report_population import groups_in

    # every run under OUT, this call's and earlier calls' (a grid split over calls merges here)
    path, text = write_report(runs.run_dirs_in(out), out / "report",
                              include_incomplete=args.include_incomplete, groups=groups_in(out))
    print(text)
    print(f"report: {path}")
    failed = failures(rows, arms, seeds)
    for line in failed:
        print(f"evotui compare: arm {line}", file=sys.stderr)
    if failed:
        print(f"evotui compare: {len(failed)} arm(s) did not finish; the same command again resumes them",
              file=sys.stderr)
    return 1 if failed else 0


def _report(args) -> int:
    from backend.tools.report import write_report

    paths = [Path(r).expanduser() for r in args.runs]
    inputs = [report_inputs(p) for p in paths]
    out = Path(args.out).expanduser() if args.out else default_report_dir(paths)
    path, text = write_report([d for dirs, _ in inputs for d in dirs], out, include_incomplete=args.include_incomplete,
                              groups=[g for _, groups in inputs for g in groups])
    print(text)
    print(f"report: {path}")
    return 0


def report_inputs(p: Path) -> tuple[list[Path], list]:
    """The runs a report argument names, and its groups of runs (populations, best-of-n:
    backend/tools/report_population.py): a run directory, a population directory, or the runs
    of a compare folder (one that holds compare.json). Any other folder is refused: a folder of
    unrelated runs is no comparison."""
    from backend.population.store import PopulationStore
    from backend.runs import run_dirs_in
    from backend.tools.report_population import groups_in, population_group

    if (p / "run.db").is_file():
        return [p], []
    if PopulationStore.exists(p):
        return [], [population_group(p)]
    if (p / "compare.json").is_file():
        found, groups = run_dirs_in(p), groups_in(p)
        if found or groups:
            return found, groups
        raise UsageError(f"compare folder {p} holds no runs yet")
    raise UsageError(f"not an evotui run directory or compare folder, nor a population: {p} (a run holds run.db, a "
                     "population population.sqlite, a compare folder compare.json; to compare runs of your own, "
                     "name each run directory)")


def default_report_dir(paths: list[Path]) -> Path:
    """Where a report goes without --out: into the run's (or compare folder's) own `report/`; for
    several paths, a folder beside the first named after the set, so no report overwrites
    another's."""
    if len(paths) == 1:
        return paths[0] / "report"
    import hashlib

    key = "\n".join(sorted(str(p.resolve()) for p in paths))
    return paths[0].parent / f"report-{len(paths)}-runs-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def _export(args) -> int:
    out = Path(args.out).expanduser() if args.out else None
    if args.policy:
        return _export_policy(args, out)
    if args.step is not None or args.dtype:
        raise UsageError(f"{'--step' if args.step is not None else '--dtype'} is for a policy to export: add --policy")
    from backend.tools.export import export

    path, n = export(_run_dir(args.run_dir), args.format or "jsonl", out)
    print(f"{n} rollouts written to {path}")
    return 0


def _export_policy(args, out: Path | None) -> int:
    from backend.end_summary import count_line
    from backend.tools.export_policy import export_policy

    if args.format:
        raise UsageError("--format is for the rollouts; --policy writes a model folder")
    path, meta = export_policy(_run_dir(args.run_dir), out, args.step, args.dtype or "float32")
    print(f"the policy of step {meta['step']} (version {meta['policy_version']}, {meta['base_model']} with its "
          f"LoRA adapter merged, {meta['dtype']}) written to {path}")
    for split, ev in sorted(meta["heldout"].items()):
        print(f"  {split}: {ev['accuracy']:.3f} at step {ev['step']} ({count_line(ev)})")
    print(f"load it with: AutoModelForCausalLM.from_pretrained({str(path)!r})")
    return 0
