"""A newcomer's session, for real: bare `evotui` in tmux, the stop key, the confirmation.

`tests/newcomer_tmux.sh` drives the real app and the real engine (the embedded model, the CPU
default run) in an 80x24 tmux pane and reads the run's database: the run goes live, S opens the
confirmation, Tab + Enter confirms, and the engine stops with its state saved. The bound here
is generous (this is a behaviour test; the script's default target is 5 s and the README
reports what it measured): a stop used to wait for a whole step and a round, minutes on the CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "newcomer_tmux.sh"
BOUND_S = 30


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (tests/newcomer_tmux.sh drives it)")
def test_a_newcomer_stops_a_live_run_from_the_tui(tmp_path):
    evotui = Path(sys.executable).with_name("evotui")
    env = dict(os.environ, EVOTUI_HOME=str(tmp_path / "home"), OUT=str(tmp_path / "panes"), TARGET_S=str(BOUND_S),
               EVOTUI=str(evotui), PYTHON=sys.executable)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "commands: stop applied;" in out
    live = (tmp_path / "panes" / "pane-live.txt").read_text()
    assert "running" in live  # the header said so before the stop ...
    dialog = (tmp_path / "panes" / "pane-dialog.txt").read_text()
    assert "Stop the run?" in dialog
    pane = (tmp_path / "panes" / "pane-stopped.txt").read_text()
    assert "● stopped" in pane and "stop: applied" in pane  # ... and "stopped" after, with the ack
    run_dirs = list((tmp_path / "home" / "runs").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "run.db").exists()
