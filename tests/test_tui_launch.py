"""The entry points: `open_tui` attaches, `start_and_open` starts an engine and asks on quit.

A stand-in engine (a small script over the fixture run) plays the engine's
part: it creates the run, acknowledges commands and exits on `stop`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from textual.app import App

import evotui.engine_process as engine_process
import evotui.launch as launch
from backend.store import Store
from evotui.app import EvoApp
from evotui.engine_process import EngineProbe, engine_health, rss_memory
from evotui.launch import open_tui, start_and_open
from engine_waits import communicate
from tui_fixtures import build_run, press, settle

TESTS = Path(__file__).resolve().parent

FAKE_ENGINE = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from tui_fixtures import build_run
    from backend.store import Store
    run_dir = Path(sys.argv[sys.argv.index("--run-dir") + 1])
    # like the real engine: build the run under a temporary name, then rename it
    tmp = run_dir.parent / (".creating-" + run_dir.name)
    build_run(tmp, pid=os.getpid())
    (tmp / "engine.log").unlink()  # the real engine writes none: its output is the log
    os.replace(tmp, run_dir)
    store = Store.open(run_dir / "run.db")
    while True:
        for c in store.pending_commands():
            store.ack_command(c["id"], "applied", "stopping after this step")
            if c["verb"] == "stop":
                store.set_run(status="stopped", pid=None)
                sys.exit(0)
        time.sleep(0.02)
""")


@pytest.fixture(autouse=True)
def _as_if_in_a_terminal(monkeypatch):
    """pytest's standard input is no terminal: the entry points' check for one
    (tests/test_bad_input_cli.py) is passed over here, where the app runs headless."""
    monkeypatch.setattr(launch, "require_terminal", lambda hint: None)


def drive(monkeypatch, *keys: str) -> list:
    """Make EvoApp.run headless, pressing `keys` once the data is in; returns the apps that ran."""
    ran = []

    def run(self, **_):
        async def pilot(p):
            await settle(p)
            await press(p, *keys)
        ran.append(self)
        return App.run(self, headless=True, size=(100, 32), auto_pilot=pilot)

    monkeypatch.setattr(EvoApp, "run", run)
    return ran


def test_open_tui_attaches_and_never_stops_the_run(tmp_path, monkeypatch):
    run_dir = build_run(tmp_path / "run")
    ran = drive(monkeypatch, "4", "q")
    assert open_tui(run_dir) == 0
    assert ran[0].state.run["status"] == "running"
    s = Store.open(run_dir / "run.db", readonly=True)
    assert s.count("commands") == 0
    s.close()


def test_open_tui_refuses_a_folder_without_a_run(tmp_path, capsys):
    assert open_tui(tmp_path) == 2
    assert "not an evotui run" in capsys.readouterr().err


@pytest.mark.parametrize("choice, stopped", [("s", True), ("l", False)])
def test_start_and_open_asks_on_quit(tmp_path, monkeypatch, choice, stopped):
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE.format(tests=str(TESTS)))
    procs = []

    def fake_start(run_dir, extra):
        log = open(engine_process.startup_log(Path(run_dir)), "ab")
        procs.append(subprocess.Popen([sys.executable, str(script), "--run-dir", str(run_dir), *extra],
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return procs[-1]

    monkeypatch.setattr(launch, "start_engine", fake_start)
    drive(monkeypatch, "q", choice)
    run_dir = tmp_path / "run"
    try:
        assert start_and_open(run_dir, ["--steps", "3"]) == 0
        assert (run_dir / "engine.log").exists() and not engine_process.startup_log(run_dir).exists()
        if stopped:
            communicate(procs[0], "the stand-in engine to leave on stop")
            assert procs[0].returncode == 0  # the engine acknowledged `stop` and left
        else:
            assert procs[0].poll() is None  # still running in its own session
    finally:
        if procs[0].poll() is None:
            procs[0].kill()
            procs[0].wait()


def test_start_and_open_reports_an_engine_that_died_early(tmp_path, monkeypatch, capsys):
    def fake_start(run_dir, extra):
        engine_process.startup_log(Path(run_dir)).write_text("evotui: error: model.name: no such model path 'x'\n")
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])

    monkeypatch.setattr(launch, "start_engine", fake_start)
    assert start_and_open(tmp_path / "run", []) == 2
    assert "no such model path" in capsys.readouterr().err


def test_the_real_probe_and_health(tmp_path):
    probe = EngineProbe()
    assert probe.alive(os.getpid()) and not probe.alive(None) and not probe.alive(2**40)
    assert rss_memory(os.getpid()).startswith("RSS") or not Path("/proc").exists()
    run_dir = build_run(tmp_path / "run")
    assert not engine_health({"status": "running", "pid": os.getpid()}, run_dir, probe).dead
    dead = engine_health({"status": "running", "pid": 2**40}, run_dir, probe)
    assert dead.dead and dead.resumable and dead.detail[-1].startswith("step  12")
    assert engine_health({"status": "stopped", "pid": None}, run_dir, probe).resumable
    assert not engine_health({"status": "finished", "pid": None}, run_dir, probe).resumable
