"""Starting, resuming and summarising runs: what `evotui run --headless` does.

A run directory holds everything: `run.db`, `config.toml`, `harness.py` (the
current harness), `checkpoints/`, and `engine.log` when started by the TUI.
Nothing is written until the config, the harness and the model have loaded,
so a bad input never leaves a half-made run behind.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime
from pathlib import Path

from backend.config import ConfigError, RunConfig, config_from_dict, load_config, to_toml
from backend.disk import tree_bytes
from backend.errors import RunStopped
from backend.harness.loader import Harness, default_harness_path, sha
from backend import run_lock
from backend.store import Store, StoreError, loads


def home() -> Path:
    env = os.environ.get("EVOTUI_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("evotui"))


def runs_root() -> Path:
    return home() / "runs"


def new_run_dir(cfg: RunConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = runs_root() / f"{stamp}-{cfg.name or cfg.domain.replace(',', '+')}-s{cfg.seed}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = Path(f"{base}-{k}")
    return path


def harness_code(cfg: RunConfig) -> str:
    path = Path(cfg.harness).expanduser() if cfg.harness else default_harness_path(cfg.domains[0])
    from backend.harness.loader import HarnessError

    code = path.read_text()
    try:
        h = Harness.from_code(code)
    except HarnessError as e:  # one clear line, which names the file
        raise HarnessError(f"harness {path}: {e}") from None
    if h.domain != cfg.domains[0]:
        raise HarnessError(f"harness {path} is for domain '{h.domain}', the run is '{cfg.domains[0]}'")
    return code


STAGING_PREFIX = "."
"""A run directory is built as `.NAME.creating-PID` beside NAME, then renamed: a hidden name that
no listing of runs takes for a run."""


def run_dirs_in(folder: Path) -> list[Path]:
    """The run directories directly under `folder` (each holds a run.db), in name order. A staging
    directory left by a process killed while it created its run (a default SIGTERM gives it no
    chance to clean up) is not one."""
    return sorted(d for d in folder.iterdir()
                  if not d.name.startswith(STAGING_PREFIX) and (d / "run.db").is_file())


def _remove_stale_staging(run_dir: Path) -> None:
    """Delete `.NAME.creating-PID` directories of processes that no longer exist."""
    for d in run_dir.parent.glob(f"{STAGING_PREFIX}{run_dir.name}.creating-*"):
        pid = d.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def create_run(run_dir: Path, cfg: RunConfig, code: str) -> Store:
    """Make the run directory atomically: built under a temporary name, then renamed."""
    if (run_dir / "run.db").exists():
        raise StoreError(f"{run_dir} already holds a run; continue it with --resume {run_dir}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise StoreError(f"{run_dir} exists and is not empty; pick another --run-dir")
    from backend.config import to_dict

    run_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(run_dir)
    tmp = run_dir.parent / f"{STAGING_PREFIX}{run_dir.name}.creating-{os.getpid()}"
    tmp.mkdir()
    try:
        (tmp / "config.toml").write_text(to_toml(cfg))
        store = Store.open(tmp / "run.db")
        store.create_run(run_dir.name, to_dict(cfg), cfg.seed, cfg.steps)
        v = store.add_harness_version(code, None, "", "active", sha(code), note="initial harness")
        store.set_run(harness_version=v)
        store.close()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if run_dir.exists():
        run_dir.rmdir()
    os.replace(tmp, run_dir)
    return Store.open(run_dir / "run.db", create=False)


def start(cfg: RunConfig, run_dir: Path | None, quiet: bool = False,
          own_process: bool = False) -> tuple[Path, dict]:
    """Create a run and train it to the end. Returns (run_dir, summary). `own_process`: this
    process exists for the run alone (`evotui run --headless`): its heap is frozen before the
    loop (`backend.heap`)."""
    code = harness_code(cfg)  # a broken harness file is reported before torch is imported
    from backend.ddp.launch import check as check_ranks
    from backend.ddp.launch import world_size
    from backend.policy.load import load_fast_policy
    from backend.envs import make_env

    make_env(cfg)  # surfaces bad domain settings before anything is written
    check_proposer(cfg)
    check_ranks(cfg, world_size(cfg))  # a data-parallel setting it cannot honour, before anything is written
    lm = load_fast_policy(cfg.model, seed=cfg.seed)  # Unsloth where it can train here, else peft
    run_dir = Path(run_dir) if run_dir else new_run_dir(cfg)
    store = create_run(run_dir, cfg, code)
    with run_lock.held(run_dir):  # one engine a run: a --resume of it now is refused
        return _start(run_dir, store, cfg, lm, quiet, own_process)


def _start(run_dir: Path, store: Store, cfg: RunConfig, lm, quiet: bool, own_process: bool) -> tuple[Path, dict]:
    from backend.ddp.launch import ranks
    from backend.loop import Engine

    if not quiet:
        print(f"run dir: {run_dir}", flush=True)
    store.set_run(device=device_label(cfg))
    with ranks(cfg, adapter=None) as dist:  # None: one process
        return run_dir, _drive(Engine(run_dir, cfg, store, quiet=quiet, lm=lm, dist=dist), store, quiet,
                               own_process)


LIVE_SETTINGS = {"evolve.auto_promote": "auto_promote"}
"""Config keys whose live value is a column of `runs`: an operator changes them while the run
lives (the TUI's toggle, a command, a flag given with --resume), and the engine reads the column,
never the config it started with."""


def live_settings(cfg: RunConfig, overrides: list[str] | None) -> dict:
    """The `runs` columns that `overrides` (KEY=VALUE) set, with their values in `cfg`.

    >>> live_settings(RunConfig(), ["evolve.auto_promote=true"])
    {'auto_promote': 1}
    """
    keys = {o.split("=", 1)[0].strip() for o in overrides or []}
    out = {}
    for key, column in LIVE_SETTINGS.items():
        if key in keys:
            section, name = key.split(".")
            out[column] = int(getattr(getattr(cfg, section), name))
    return out


def resume(run_dir: Path, steps: int | None = None, overrides: list[str] | None = None,
           quiet: bool = False, own_process: bool = False) -> tuple[Path, dict]:
    """Continue a stopped or crashed run from its last completed step.

    Settings in `overrides` that an operator may change while a run lives (LIVE_SETTINGS, e.g.
    `--auto-promote`) are written to the `runs` row, where the engine reads them."""
    store = Store.open(run_dir, create=False)
    with run_lock.held(run_dir):  # before anything is written: one engine a run
        return _resume(Path(run_dir), store, steps, overrides, quiet, own_process)


def _resume(run_dir: Path, store: Store, steps: int | None, overrides: list[str] | None, quiet: bool,
            own_process: bool) -> tuple[Path, dict]:
    from backend.ddp.launch import ranks
    from backend.loop import Engine

    run = store.run()
    data = loads(run["config_json"], {})
    if overrides:
        from backend.config import apply_overrides, check_resume, stored_config

        stored = stored_config(data)
        cfg = config_from_dict(apply_overrides(data, overrides))
        check_resume(stored, cfg)
        moved = [f"{k} '{getattr(cfg.model, k)}' (the run started with '{getattr(stored.model, k)}')"
                 for k in ("name", "gguf_file") if getattr(cfg.model, k) != getattr(stored.model, k)]
        if moved:
            store.log("warn", f"resumed with model.{'; model.'.join(moved)}")
    else:
        cfg = config_from_dict(data)
    if steps is None and "steps" not in {o.split("=", 1)[0].strip() for o in overrides or []}:
        steps = run["steps_total"]  # the total it was last asked for: an earlier --resume --steps N stands
    if steps is not None:
        cfg.steps = steps
    done = store.last_step()
    if cfg.steps < done:  # a total, not a count of more steps: below what is done it would rewrite the total
        raise ConfigError(f"--steps is the run's total and it has {done} steps already, more than {cfg.steps}; "
                          f"--steps {done + cfg.steps} trains {cfg.steps} more")
    if run["pid"] and run["status"] == "running" and pid_alive(run["pid"]) and run["pid"] != os.getpid():
        raise StoreError(f"{run_dir} is already running (pid {run['pid']})")
    check_proposer(cfg)
    store.set_run(steps_total=cfg.steps, **live_settings(cfg, overrides))
    if not quiet:
        print(f"resuming {run_dir} after step {done}", flush=True)
    store.set_run(device=device_label(cfg))
    pv = store.current_policy_version()  # the Engine loads the same one
    adapter = store.checkpoint_of(pv)
    with ranks(cfg, adapter=str(adapter) if adapter else None) as dist:
        return Path(run_dir), _drive(Engine(Path(run_dir), cfg, store, quiet=quiet, dist=dist), store, quiet,
                                     own_process)


def device_label(cfg: RunConfig) -> str:
    """Where this run trains, for `evotui runs` and the TUI's header: the device or the ranks
    (backend/ddp), and the node when a scheduler named it (EVOTUI_NODE: `compare --ray` sets it)."""
    from backend.ddp.launch import describe

    node = os.environ.get("EVOTUI_NODE")
    return describe(cfg) + (f" on {node}" if node else "")


def check_proposer(cfg: RunConfig) -> None:
    """An LLM proposer that cannot be reached at start-up is a configuration mistake (a wrong
    port, a server not started): one clear line now. Outages later in the run become failed
    proposals with the reason, and the run goes on."""
    if cfg.evolve.enabled and cfg.evolve.proposer == "llm":
        from backend.evolve.llm import check_endpoint

        why = check_endpoint(cfg.evolve.llm)
        if why:
            raise ConfigError(f"evolve.proposer is 'llm' but {why}; start it, or use --set evolve.proposer=offline")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists; one another user owns exists too (EPERM)."""
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except (OSError, TypeError):
        return False


def _drive(engine, store: Store, quiet: bool, own_process: bool = False) -> dict:
    t0 = time.time()
    if own_process:
        from backend.heap import freeze_long_lived

        freeze_long_lived()
    try:
        engine.run()
    except KeyboardInterrupt:
        store.set_run(status="stopped", pid=None)
        raise
    except Exception as e:
        if _disk_full(e) or type(e).__name__ == "ResourceExhausted":
            msg = (f"disk full: the run stopped after step {store.last_step()} with its state saved; "
                   f"free space and resume with `evotui run --headless --resume {engine.run_dir}`"
                   if _disk_full(e) else str(e))
            try:
                store.set_run(status="stopped", pid=None, error=msg)
            except Exception:
                pass  # the disk may be too full to record it; the last committed step is intact
            raise RunStopped(msg) from None
        _record_crash(store, e)
        raise
    except BaseException as e:
        _record_crash(store, e)
        raise
    return summary(store, time.time() - t0)


def _disk_full(e: BaseException) -> bool:
    import errno
    import sqlite3

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    if isinstance(e, sqlite3.OperationalError) and "full" in str(e):
        return True
    text = str(e)  # e.g. safetensors' SafetensorError wraps ENOSPC in its message
    return "No space left on device" in text or "os error 28" in text


def _record_crash(store: Store, e: BaseException) -> None:
    import traceback

    try:
        store.set_run(status="crashed", pid=None, error=f"{type(e).__name__}: {e}"[:2000])
        store.log("error", traceback.format_exc(), kind="traceback")
    except Exception:
        pass


def summary(store: Store, seconds: float | None = None) -> dict:
    run = store.run()
    from backend.store.reader import has_columns

    evals = store.reported_evals()
    val = store.latest_eval("validation") if has_columns(store, "evals", ("split",)) else None  # m003 on
    steps = store.step_series()
    s = {
        "run": run["name"], "status": run["status"], "steps": store.last_step(),
        "heldout_acc": evals[-1]["accuracy"] if evals else None,
        "heldout_acc_start": evals[0]["accuracy"] if evals else None,
        "val_acc": val["accuracy"] if val else None,
        "dead_group_frac_first": steps[0]["dead_group_frac"] if steps else None,
        "dead_group_frac_last": steps[-1]["dead_group_frac"] if steps else None,
        "agreement_last": steps[-1]["agreement"] if steps else None,
        "mean_step_s": (sum(r["total_ms"] for r in steps) / len(steps) / 1000) if steps else None,
        "rollouts": store.count("rollouts"), "diagnoses": store.count("diagnoses"),
        "harness_version": run["harness_version"], "policy_version": run["policy_version"],
        "interventions": store.count("interventions"),
        "promoted": store.count_interventions(status="promoted"),
        "wall_s": seconds,
    }
    try:
        from backend.evolve import lineage

        s["lineage"] = lineage(store, run["harness_version"])
    except Exception:
        s["lineage"] = []
    return s


def list_runs() -> list[dict]:
    out = []
    root = runs_root()
    for d in run_dirs_in(root) if root.exists() else []:
        try:
            st = Store.open(d, readonly=True)
            r = st.run()
            status = r["status"]
            if status == "running" and not pid_alive(r["pid"]):
                status = "crashed?"
            out.append({"dir": str(d), "name": r["name"], "status": status, "step": r["step"],
                        "steps_total": r["steps_total"], "heldout_acc": r["heldout_acc"], "domain": r["domain"],
                        "device": r.get("device"), "bytes": tree_bytes(d)})
            st.close()
        except StoreError as e:
            out.append({"dir": str(d), "name": d.name, "status": f"unreadable: {e}", "step": None,
                        "steps_total": None, "heldout_acc": None, "domain": None, "device": None,
                        "bytes": tree_bytes(d)})
    return out


def load_cli_config(path: str | None, sets: list[str], steps: int | None, seed: int | None) -> RunConfig:
    extra = list(sets)
    if steps is not None:
        extra.append(f"steps={steps}")
    if seed is not None:
        extra.append(f"seed={seed}")
    return load_config(path, extra, check=harness_code)  # the harness file, before torch
