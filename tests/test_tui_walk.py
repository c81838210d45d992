"""The operator's small traps, one test each: what the screen says is what is true."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from textual.widgets import Button, DataTable, Input

from backend.store import Store
from evotui.components.confirm_modal import ConfirmModal
from evotui.components.engine_banner import EngineBanner
from evotui.launch import exit_line
from tui_fixtures import build_run, make_app, poll, press, settle

SIZE = (100, 32)


def test_the_rebase_dialog_counts_every_change_it_drops(tmp_path):
    """It said "drops v5's change" when approving dropped four."""
    run_dir = build_run(tmp_path / "run")
    store = Store.open(run_dir / "run.db")
    v3 = dict(store.get("harness_versions", 3))
    with store.tx():
        for vid in (4, 5):
            store.insert("harness_versions", dict(v3, id=vid, parent=vid - 1, sha=f"{vid}", status="superseded"))
        store.update("interventions", 3, {"parent_version": 1})
    store.set_run(harness_version=5)
    store.close()

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)  # the queue is read first; before it, nothing is selected
            await press(pilot, "a")
            assert isinstance(app.screen, ConfirmModal)
            assert "built on v1; v5 is active: approving drops 4 changes: v2..v5" in \
                str(app.screen.query_one("#message").render())
    asyncio.run(go())


def test_the_engine_gone_banner_takes_two_rows(tmp_path):
    """It took 5 of 24 rows."""
    run_dir = build_run(tmp_path / "run", status="running", pid=424242, error="RuntimeError: boom")

    async def go():
        app = make_app(run_dir, alive=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            banner = app.screen.query_one(EngineBanner)
            text = str(banner.render())
            assert banner.display and banner.outer_size.height <= 2
            assert "pid 424242" in text and "R resumes" in text and "runs.error: RuntimeError: boom" in text
    asyncio.run(go())


def test_after_enter_in_the_search_box_digits_switch_screens(tmp_path):
    """Digits typed into the search field after Enter."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="rollouts")
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "slash")
            assert isinstance(app.focused, Input)
            await pilot.press(*"add")
            await press(pilot, "enter")
            assert isinstance(app.focused, DataTable)
            await press(pilot, "4")
            assert app.current_mode == "interventions"
    asyncio.run(go())


def test_stop_then_quit_says_the_run_stopped(tmp_path):
    """After S then q it printed "the run goes on in the background"."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, owns_engine=True)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "S", "tab", "enter")
            store = Store.open(run_dir / "run.db")  # the engine stops
            for c in store.pending_commands():
                store.ack_command(c["id"], "applied", "stopped")
            store.set_run(status="stopped", pid=None)
            store.close()
            await poll(pilot)
            await press(pilot, "q")  # nothing left to ask about
        return app

    app = asyncio.run(go())
    line = exit_line(run_dir, app.exit_status, app.stop_requested, app.owns_engine, app.engine_dead_on_exit)
    assert app.exit_status == "stopped" and "the run has stopped" in line and "background" not in line


def test_stop_then_quit_before_the_engine_stopped_does_not_ask_again(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, owns_engine=True)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "S", "tab", "enter", "q")
            assert not app.is_running or not isinstance(app.screen, ConfirmModal)
        return app

    app = asyncio.run(go())
    line = exit_line(run_dir, app.exit_status, app.stop_requested, app.owns_engine, app.engine_dead_on_exit)
    assert line.startswith("stop requested")


def test_an_engine_this_tui_started_is_reaped_when_it_exits(tmp_path):
    """A stopped engine stayed a zombie (and its pid looked alive) while the TUI was open."""
    run_dir = build_run(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
    assert Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1].startswith("Z")

    async def go():
        app = make_app(run_dir, engine_proc=proc)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            assert proc.returncode == 0 and app.engine_procs == []
    asyncio.run(go())
    assert not Path(f"/proc/{proc.pid}").exists()


def test_toasts_leave_a_dialogs_buttons_visible(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await press(pilot, "p")
            for i in range(4):
                app.notify(f"command #{i}: sent, waiting for the engine", title=f"Command #{i}")
            await settle(pilot)
            shown = app.screen._compositor.visible_widgets  # widget -> (region, clip): what is drawn
            toasts = [region.intersection(clip) for w, (region, clip) in shown.items() if type(w).__name__ == "Toast"]
            assert toasts
            for button in app.screen.query(Button):
                assert not any(t.overlaps(button.region) for t in toasts), (button.id, toasts)
    asyncio.run(go())
