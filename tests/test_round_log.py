"""`benchmarks/round_log.py`: the rounds of a run and the errors it logged, as the GPU
evidence script brings them back (a round that stopped on an error must be told apart
from one that proposed nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend.evolve import schedule
from backend.evolve import run_round
from synthetic_run import build_run, context, make_probe

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "round_log.py"


def test_rounds_and_their_errors_are_listed(tmp_path, monkeypatch):
    store = build_run(tmp_path / "run" / "run.db", steps=6)
    run_round(context(store, probe=make_probe()))

    def broken(*a, **k):
        raise RuntimeError("the proposer broke")

    monkeypatch.setattr(schedule, "plan", broken)
    run_round(context(store, step=6, probe=make_probe()))
    store.close()
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "run"), str(tmp_path / "nothing")],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "== run: 2 rounds"
    assert "proposed" in lines[1] and lines[2].endswith("error: RuntimeError: the proposer broke")
    assert "  error at step 6: Traceback (most recent call last):" in lines  # the round's stored traceback
    assert "    RuntimeError: the proposer broke" in lines
    assert lines[-1].startswith("== ") and "cannot read" in lines[-1]  # a folder without a run
