"""A stop request to `evotui compare` (SIGTERM from a scheduler or `timeout`, or Ctrl-C): the
runs it reaches stop at a step boundary with their state saved, nothing more is launched, and
compare.json is written. Both ways a grid runs: parallel processes (`--jobs`, the GPU path) and
one run after another in the compare process. The same command then resumes stopped and
unstarted arms alike: tests/test_compare_report.py re-runs a grid with both."""

import json
import signal
import sqlite3
import subprocess
import sys

import pytest

from conftest import set_flags
from engine_waits import communicate, either, run_files, wait_for

STEPS = 60


def _committed(run_dir) -> int:
    try:
        db = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True, timeout=1)
        try:
            return db.execute("SELECT coalesce(max(step), 0) FROM steps").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def _signal_once_training(proc, run_dirs) -> None:
    """SIGTERM to compare once every run it started has committed a step (so each is in its loop:
    before it, a run leaves on SIGTERM like on Ctrl-C, tested in tests/test_runs.py)."""
    wait_for("every run of the grid to commit a step", lambda: min(map(_committed, run_dirs)) >= 1, proc,
             progress=either(*map(run_files, run_dirs)))
    proc.send_signal(signal.SIGTERM)


def _runs_row(run_dir) -> dict:
    db = sqlite3.connect(run_dir / "run.db")
    db.row_factory = sqlite3.Row
    try:
        return dict(db.execute("SELECT status, pid, error FROM runs").fetchone())
    finally:
        db.close()


@pytest.mark.parametrize("jobs, seeds, running", [(2, "0,1,2", 2), (1, "0,1", 1)], ids=["parallel", "sequential"])
def test_sigterm_stops_the_grid_and_the_same_command_resumes(tmp_path, tiny_overrides, tiny_model, jobs, seeds,
                                                             running):
    out = tmp_path / "cmp"
    # a tiny random Llama trains a step in well under a second: STEPS that no run reaches before
    # the stop, however fast the machine
    sets = set_flags(*tiny_overrides, f"model.name='{tiny_model}'")
    cmd = [sys.executable, "-m", "evotui", "compare", "--steps", str(STEPS), "--seeds", seeds, "--arms", "static",
           "--jobs", str(jobs), "--out", str(out), "--profile", "cpu", *sets]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _signal_once_training(proc, [out / f"static-s{k}" for k in range(running)])
    _, stderr = communicate(proc, "compare to stop the grid")
    assert proc.returncode == 1, stderr[-3000:]
    assert "the same command again resumes them" in stderr
    rows = json.loads((out / "compare.json").read_text())
    started, rest = rows[:running], rows[running:]
    for r in started:  # stopped on request at a step boundary, its state saved, its process gone
        assert r["status"] == "stopped" and r["steps_done"] < STEPS, r
        assert _runs_row(out / f"static-s{r['seed']}") == {"status": "stopped", "pid": None, "error": None}
    assert [r["status"] for r in rest] == ["not started"]
    assert not (out / f"static-s{rest[0]['seed']}").exists() and not list(out.glob(".*creating*"))



@pytest.mark.parametrize("argv, says", [(["compare", "--steps", "1"], "the same command again resumes"),
                                        (["run", "--headless"], "evotui run --headless --resume")])
def test_an_interrupt_says_how_to_go_on(monkeypatch, capsys, argv, says):
    import evotui.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_dispatch", interrupted)
    assert cli.main(argv) == 130
    assert says in capsys.readouterr().err
