"""The TUI over a live short run of the real engine (embedded default model):
attach while the engine works, watch steps arrive, then navigate every screen."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from textual.widgets import DataTable

from backend.store import Store
from conftest import set_flags
from engine_waits import Watch, communicate, cpu, either, run_files, wait_for
from tui_fixtures import poll, press, settle

SCREENS = "1234567"


def test_tui_follows_a_live_real_run(tmp_path, tiny_overrides):
    run_dir = tmp_path / "live"
    sets = set_flags(*tiny_overrides)
    proc = subprocess.Popen([sys.executable, "-m", "evotui", "run", "--headless", "--quiet", "--steps", "3",
                             "--run-dir", str(run_dir), *sets, "--set", "evolve.every=2",
                             "--set", "evolve.candidates=1", "--set", "evolve.probe_tasks=1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for("the run's database", lambda: (run_dir / "run.db").exists(), proc, poll_s=0.2)
    written = run_files(run_dir)

    async def go():
        from evotui.app import EvoApp

        app = EvoApp(run_dir, watch=True)  # real watchfiles and the real engine probe
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            # the engine is still working: steps arrive while the TUI is open
            seen_steps = set()
            watch = Watch("the TUI to show the run finished", either(cpu(proc), written))
            while True:
                seen_steps.add(len(app.state.steps))
                if app.state.run and app.state.run.get("status") == "finished" or proc.poll() not in (None, 0):
                    break  # (an engine that failed fails the asserts below)
                watch.check()
                await pilot.pause(0.5)
            await poll(pilot)
            assert len(seen_steps) >= 2  # the step count changed while we watched
            assert app.state.run["status"] == "finished"
            assert len(app.state.steps) == 3
            for key in SCREENS:
                await press(pilot, key)
            await press(pilot, "2")
            rows = app.screen.query_one(DataTable).rows
            assert len(rows) == 3 * 4  # every rollout of the run
    asyncio.run(go())
    _, err = communicate(proc, "the engine to exit", written)
    assert proc.returncode == 0, err[-3000:]
    s = Store.open(run_dir, readonly=True)
    assert s.count("commands") == 0  # attaching never writes
