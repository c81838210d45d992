"""The run lifecycle (backend/runs.py): flags given with --resume reach the runs row.

The engine is replaced by a stand-in that trains nothing, so these run in a moment; what is
checked is what `evotui run --headless --resume` writes before the engine starts.
"""

from __future__ import annotations

import pytest

from backend.store import Store
from evotui.cli import main
from tui_fixtures import build_run


class IdleEngine:
    """Stands in for backend.loop.Engine: records the config it was given, trains nothing."""

    seen: list = []

    def __init__(self, run_dir, cfg, store, quiet=False, lm=None, dist=None):
        self.run_dir, self.cfg = run_dir, cfg
        IdleEngine.seen.append(cfg)

    def run(self) -> None:
        pass


@pytest.fixture
def stopped_run(tmp_path, monkeypatch):
    import backend.loop

    monkeypatch.setattr(backend.loop, "Engine", IdleEngine)
    IdleEngine.seen = []
    return build_run(tmp_path / "run", status="stopped")


def auto_promote(run_dir) -> int:
    store = Store.open(run_dir, create=False)
    try:
        return store.run()["auto_promote"]
    finally:
        store.close()


def test_resume_with_auto_promote_writes_it_to_the_runs_row(stopped_run, capsys):
    assert auto_promote(stopped_run) == 0
    assert main(["run", "--headless", "--resume", str(stopped_run), "--auto-promote", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 1
    assert IdleEngine.seen[-1].evolve.auto_promote is True


def test_resume_supervised_turns_it_off(stopped_run):
    Store.open(stopped_run, create=False).set_run(auto_promote=1)
    assert main(["run", "--headless", "--resume", str(stopped_run), "--supervised", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 0


def test_resume_without_the_flag_keeps_the_operators_choice(stopped_run):
    Store.open(stopped_run, create=False).set_run(auto_promote=1)  # toggled in the TUI while it ran
    assert main(["run", "--headless", "--resume", str(stopped_run), "--steps", "30", "--quiet"]) == 0
    assert auto_promote(stopped_run) == 1
    store = Store.open(stopped_run, create=False)
    assert store.run()["steps_total"] == 30
    store.close()


def test_a_later_resume_keeps_the_total_an_earlier_one_asked_for(stopped_run):
    """`--resume --steps 30` then, after a stop, `--resume`: the run goes on to 30, not back to the
    total it was created with (it would finish at once, short of what was asked)."""
    assert main(["run", "--headless", "--resume", str(stopped_run), "--steps", "30", "--quiet"]) == 0
    assert main(["run", "--headless", "--resume", str(stopped_run), "--quiet"]) == 0
    assert IdleEngine.seen[-1].steps == 30
    assert main(["run", "--headless", "--resume", str(stopped_run), "--set", "steps=40", "--quiet"]) == 0
    assert IdleEngine.seen[-1].steps == 40


def _dead_pid() -> int:
    """A pid no process has: a child that has exited and been reaped."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_staging_directory_left_by_a_killed_creation_is_neither_listed_nor_kept(tmp_path):
    """A run killed (default SIGTERM) while `create_run` built it leaves `.NAME.creating-PID`
    with a half-made run.db, on which `evotui report` over the compare folder used to fail.
    Listings skip it, and the next creation of NAME removes it."""
    from backend.config import RunConfig
    from backend.runs import create_run, harness_code, run_dirs_in

    build_run(tmp_path / "static-s0", status="stopped")
    stale = tmp_path / f".control-s0.creating-{_dead_pid()}"
    stale.mkdir()
    Store.open(stale / "run.db").close()  # a database without the run's rows
    assert run_dirs_in(tmp_path) == [tmp_path / "static-s0"]
    (tmp_path / "compare.json").write_text("[]")  # what makes the folder a compare folder
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    assert "Runs: 1 " in (tmp_path / "report" / "report.md").read_text()

    cfg = RunConfig()
    create_run(tmp_path / "control-s0", cfg, harness_code(cfg)).close()
    assert not stale.exists()
    assert run_dirs_in(tmp_path) == [tmp_path / "control-s0", tmp_path / "static-s0"]


def test_a_failed_creation_removes_its_staging_directory(tmp_path, monkeypatch):
    from backend.config import RunConfig
    from backend.runs import create_run, harness_code

    def refuse(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(Store, "create_run", refuse)
    cfg = RunConfig()
    with pytest.raises(OSError):
        create_run(tmp_path / "r", cfg, harness_code(cfg))
    assert list(tmp_path.iterdir()) == []


def test_sigterm_before_the_loop_interrupts_like_ctrl_c():
    """`evotui run --headless` before its loop (model load, run creation): SIGTERM raises
    KeyboardInterrupt, so `create_run` cleans up and `main` prints one line, instead of the
    default action killing the process mid-write."""
    import os
    import signal

    from evotui.cli import sigterm_interrupts

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
    assert signal.getsignal(signal.SIGTERM) == before


def test_evotui_runs_does_not_list_a_staging_directory(tmp_path, monkeypatch):
    from backend.runs import list_runs

    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path))
    build_run(tmp_path / "runs" / "r1", status="stopped")
    stale = tmp_path / "runs" / f".r2.creating-{_dead_pid()}"
    stale.mkdir()
    Store.open(stale / "run.db").close()
    assert [r["dir"] for r in list_runs()] == [str(tmp_path / "runs" / "r1")]


def test_a_pid_is_alive_when_its_process_exists_whoever_owns_it(monkeypatch):
    import os

    from backend.runs import pid_alive

    def refused(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    assert pid_alive(os.getpid()) and not pid_alive(_dead_pid()) and not pid_alive(None)
    monkeypatch.setattr(os, "kill", refused)
    assert pid_alive(1)  # another user's process: a staging directory it is building stays


def test_steps_below_what_is_done_are_refused_with_the_total_meant(stopped_run, capsys):
    """`--steps` counts the run's total: asking 5 of a run at step 12 was taken as the new total
    (the summary read "finished, 12 of 5 steps" and later resumes stopped at once)."""
    assert main(["run", "--headless", "--resume", str(stopped_run), "--steps", "5", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("evotui: error: --steps is the run's total and it has 12 steps already, more than 5; "
                   "--steps 17 trains 5 more"), err
    store = Store.open(stopped_run, readonly=True)
    assert store.run()["steps_total"] == 20 and IdleEngine.seen == []
    store.close()
    assert main(["run", "--headless", "--resume", str(stopped_run), "--steps", "12", "--quiet"]) == 0  # done already
