"""Pilot tests of the operator's loop: each reproduces a bug seen supervising a live run.

The app runs over the frozen fixture run (harness v2 active; #3 passed, #6 inconclusive, #1
promoted); the test plays the engine with the engine's own dispatcher where it matters.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from textual.widgets import DataTable

from backend.dispatch import Control, apply_pending
from backend.store import Store
from evotui.components.confirm_modal import ConfirmModal, RefusedModal
from evotui.components.interventions import InterventionsScreen
from evotui.components.status_bar import RunStatusBar
from tui_fixtures import build_run, make_app, poll, press, settle

SIZE = (100, 32)


def commands(run_dir) -> list[tuple[str, dict, str]]:
    s = Store.open(run_dir / "run.db", readonly=True)
    try:
        rows = s.rows("SELECT * FROM commands ORDER BY id")
        return [(c["verb"], json.loads(c["arg_json"]), c["status"]) for c in rows]
    finally:
        s.close()


def text(widget) -> str:
    return str(widget.render())


def test_pressing_p_twice_leaves_auto_promote_off(tmp_path):
    """It used to flip the confirmed state twice: two `on` commands, and a supervised run
    auto-promoted a candidate."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", "p")
            assert isinstance(app.screen, ConfirmModal) and text(app.screen.query_one("#title")) == \
                "Turn auto-promote on?"
            await press(pilot, "tab", "enter", "p")
            assert text(app.screen.query_one("#title")) == "Turn auto-promote off?"  # from the pending value
            await press(pilot, "tab", "enter")
            assert [c[:2] for c in commands(run_dir)] == [("auto_promote", {"on": True}),
                                                          ("auto_promote", {"on": False})]
            assert "pending" not in app.screen.query_one(DataTable).border_title  # off is what it is
            store = Store.open(run_dir / "run.db")  # the engine: only the newest value counts
            apply_pending(Control(store), lambda: SimpleNamespace(store=store, step=12))
            assert store.run()["auto_promote"] == 0
            store.close()
            await poll(pilot)
            assert [c[2] for c in commands(run_dir)] == ["superseded", "applied"]
            assert "auto-promote off" in app.screen.query_one(DataTable).border_title
            assert PALETTE <= palette(app)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert titles.count("Auto-promote") == 1  # the screen's `p` and the app's are one entry
    asyncio.run(go())


def test_approving_a_candidate_built_on_an_older_version_asks_for_a_rebase(tmp_path):
    """It used to promote #6 (built on v2) over v3, silently dropping v3's change."""
    run_dir = build_run(tmp_path / "run")
    store = Store.open(run_dir / "run.db")
    store.update("interventions", 3, {"parent_version": 1})  # v2 is active
    store.close()

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4")
            assert app.screen.selected == 3
            await press(pilot, "a")
            assert isinstance(app.screen, ConfirmModal)
            assert "built on v1; v2 is active: approving drops 1 change: v2" in text(app.screen.query_one("#message"))
            await press(pilot, "enter")  # Enter alone cancels
            assert commands(run_dir) == [] and isinstance(app.screen, InterventionsScreen)
            await press(pilot, "a", "tab", "enter")
            assert commands(run_dir) == [("approve", {"id": 3, "base": 1, "rebase": True}, "pending")]
    asyncio.run(go())


def test_a_refused_veto_then_typing_the_reason_fires_nothing(tmp_path):
    """`v` on a promoted intervention opened no dialog, and the reason typed next fired
    auto-promote, approvals, pause and stop."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", *["down"] * 5)
            assert app.screen.selected == 1
            await press(pilot, "v")
            assert isinstance(app.screen, RefusedModal)
            assert "only a queued intervention can be vetoed" in text(app.screen.query_one("#message"))
            await pilot.press(*"too small: Pause, Stop, apply 2 q", "enter")
            await settle(pilot)
            assert commands(run_dir) == [] and isinstance(app.screen, InterventionsScreen)
            assert app.is_running and app.current_mode == "interventions"
    asyncio.run(go())


PALETTE = {"Auto-promote", "Pause/resume", "Stop run", "Approve #3: Raise the format reward to 0.3",
           "Veto #3: Raise the format reward to 0.3", "Approve #6: Ask for the answer tag with an example"}


def palette(app) -> set[str]:
    return {c.title for c in app.get_system_commands(app.screen)}


def test_stop_and_pause_show_in_the_header_until_the_engine_has_done_them(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert PALETTE <= palette(app)  # the dashboard offers the decisions too
            assert not any(t.startswith("Approve #1:") for t in palette(app))  # promoted: nothing to approve
            bar = app.screen.query_one(RunStatusBar)
            store = Store.open(run_dir / "run.db")
            store.set_run(activity="held-out eval 16/64")
            await poll(pilot)
            assert "● running: held-out eval 16/64" in text(bar)
            await press(pilot, "P", "tab", "enter")
            assert "● pausing…" in text(bar)
            await press(pilot, "S")
            assert isinstance(app.screen, ConfirmModal) and commands(run_dir)[-1][0] == "pause"
            await press(pilot, "tab", "enter")
            assert "● stopping…" in text(bar)
            apply_pending(Control(store))  # the engine's checkpoint: pause, then stop
            store.set_run(status="stopped", activity=None)
            store.close()
            await poll(pilot)
            assert "● stopped" in text(bar) and [c[2] for c in commands(run_dir)] == ["applied", "applied"]
    asyncio.run(go())
