"""Pilot tests: the real app over frozen fixture runs; the test plays the engine's part."""

from __future__ import annotations

import asyncio
import json

import pytest
from textual.widgets import DataTable, Select

from backend.store import Store
from evotui.components.engine_banner import EngineBanner
from evotui.components.help_screen import HelpScreen
from evotui.components.intervention_detail import InterventionDetail
from evotui.components.confirm_modal import ConfirmModal, RefusedModal
from evotui.components.quit_modal import QuitModal
from evotui.components.veto_modal import VetoModal
from evotui.messages import DataChanged
from tui_fixtures import ack_pending, build_run, make_app, poll, press, settle

SIZE = (100, 32)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def run_dir(tmp_path):
    return build_run(tmp_path / "run")


def commands(run_dir) -> list[dict]:
    s = Store.open(run_dir / "run.db", readonly=True)
    try:
        return [dict(c, arg=json.loads(c["arg_json"])) for c in s.rows("SELECT * FROM commands ORDER BY id")]
    finally:
        s.close()


def table_ids(screen, selector="DataTable") -> list[int]:
    table = screen.query_one(selector, DataTable)
    return [int(k.value) for k in table.rows]


def test_every_screen_opens_with_its_data(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert type(app.screen).__name__ == "DashboardScreen"
            assert app.state.run["status"] == "running" and len(app.state.steps) == 12
            await press(pilot, "2")
            assert table_ids(app.screen)[:3] == [192, 191, 190] and len(table_ids(app.screen)) == 50
            await press(pilot, "3")
            assert table_ids(app.screen, "#g-rounds") == [2, 1]
            assert len(app.screen.query_one("#g-table", DataTable).rows) == 4
            await press(pilot, "4")
            assert table_ids(app.screen) == [3, 6, 5, 4, 2, 1]  # passed, then inconclusive, wait on top
            await press(pilot, "5")
            assert table_ids(app.screen) == [3, 2, 1] and app.screen.selected == 2
            await press(pilot, "6")
            assert len(table_ids(app.screen)) == 4
            await press(pilot, "7")
            assert app.screen.last_event == 8 and app.screen.query_one("#l-engine").line_count > 5
            await press(pilot, "question_mark")
            assert isinstance(app.screen, HelpScreen)
            await press(pilot, "escape")
            assert type(app.screen).__name__ == "LogScreen"
    run(go())


def test_every_key_has_a_palette_entry(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4")
            titles = {c.title for c in app.get_system_commands(app.screen)}
            assert {"Approve", "Approve inconclusive", "Veto", "Auto-promote", "Diff", "Help", "Pause/resume",
                    "Stop run", "Show Rollouts", "Show Skills"} <= titles
            assert "Resume engine" not in titles  # only offered when the engine is dead
    run(go())


def test_rollout_filters_and_paging(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "2")
            screen = app.screen
            screen.query_one("#f-verdict", Select).value = "wrong"
            await settle(pilot)
            assert screen.filter.verdict == "wrong" and screen.rows
            assert {r["verdict"] for r in screen.rows} == {"wrong"}
            await press(pilot, "c")
            screen.filter_by_label("truncated")
            await settle(pilot)
            assert screen.rows and all("truncated" in r["labels"] for r in screen.rows)
            await press(pilot, "c", "slash", *"calc", "enter", "escape")
            assert screen.filter.text == "calc" and {r["domain"] for r in screen.rows} == {"swe"}
            await press(pilot, "c")
            screen.query_one("#f-reward").value = "0.5..2"
            await press(pilot, "f", "tab", "tab", "tab", "tab", "enter")
            assert screen.filter.reward_min == 0.5 and min(r["reward"] for r in screen.rows) >= 0.5
            await press(pilot, "escape", "c")
            assert screen.filter.is_empty() and len(screen.rows) == 50 and screen.has_more
            screen.query_one(DataTable).move_cursor(row=49)
            await settle(pilot)
            assert len(screen.rows) == 100 and table_ids(screen)[50] == 142  # the next page, by keyset
    run(go())


def test_rollout_detail_shows_evidence_and_turns(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "2", "down", "down")
            text = str(app.screen.query_one("#d-labels").render())
            assert "no_submit" in text and "episode ended without submit" in text
            assert "run_tests" in str(app.screen.query_one("#d-turns").render())
            assert "▶ #1" in str(app.screen.query_one("#d-group").render())
    run(go())


def test_new_rollouts_appear_while_following(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "2")
            s = Store.open(run_dir / "run.db")
            row = s.get("rollouts", 192)
            row.pop("id")
            s.commit_step({"step": 13, "created_at": "2025-03-14T10:00:00", "n_rollouts": 1},
                          [dict(row, step=13)], [[]])
            s.close()
            await poll(pilot)
            assert table_ids(app.screen)[:2] == [193, 192] and app.state.run["step"] == 13
            app.screen.query_one(DataTable).move_cursor(row=5)  # away from the top: stop following
            await settle(pilot)
            s = Store.open(run_dir / "run.db")
            s.commit_step({"step": 14, "created_at": "2025-03-14T10:01:00", "n_rollouts": 1},
                          [dict(row, step=14)], [[]])
            s.close()
            await poll(pilot)
            assert table_ids(app.screen)[0] == 193 and "new rollouts above" in app.screen.query_one(
                DataTable).border_title
            await press(pilot, "n")
            assert table_ids(app.screen)[0] == 194
    run(go())


def test_approve_shows_pending_then_acknowledged(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", "a")
            assert isinstance(app.screen, ConfirmModal) and commands(run_dir) == []  # asks first
            await press(pilot, "tab", "enter")
            sent = commands(run_dir)
            assert [(c["verb"], c["arg"], c["status"]) for c in sent] == [("approve", {"id": 3, "base": 2}, "pending")]
            detail = app.screen.query_one("#i-command")
            assert "pending" in str(detail.render())
            assert "⧗approve" in str(app.screen.query_one(DataTable).get_row("3")[1])
            ack_pending(run_dir, "applied", "promoted as harness v3")
            await poll(pilot)
            assert "applied: promoted as harness v3" in str(detail.render())
            assert any("applied" in n.message for n in app._notifications)
    run(go())


def test_an_inconclusive_candidate_is_approved_only_explicitly(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", "down")
            assert app.screen.selected == 6
            row = [str(c) for c in app.screen.query_one(DataTable).get_row("6")]
            assert row[1] == "inconclusive" and row[3] == "+0.031 [-0.019, +0.081]" and row[5] == "64"
            await press(pilot, "a")
            assert commands(run_dir) == [] and isinstance(app.screen, RefusedModal)
            assert "approve it explicitly" in str(app.screen.query_one("#message").render())
            await press(pilot, "escape", "A", "tab", "enter")
            assert [(c["verb"], c["arg"]) for c in commands(run_dir)] == [
                ("approve", {"id": 6, "base": 2, "inconclusive": True})]
            detail = str(app.screen.query_one("#i-backtests").render())
            assert "95% CI [-0.019, +0.081]" in detail and "n 64" in detail
    run(go())


def test_veto_asks_for_a_reason(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", "v")
            assert isinstance(app.screen, VetoModal)
            await press(pilot, "enter")
            assert isinstance(app.screen, VetoModal) and commands(run_dir) == []  # a reason is required
            await pilot.press(*"probe too small")
            await press(pilot, "enter")
            assert [(c["verb"], c["arg"]) for c in commands(run_dir)] == [
                ("veto", {"id": 3, "reason": "probe too small"})]
            ack_pending(run_dir, "rejected", "already promoted")
            await poll(pilot)
            assert "rejected: already promoted" in str(app.screen.query_one("#i-command").render())
    run(go())


def test_approve_refuses_what_has_not_passed_and_toggles_auto_promote(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4", "down", "down", "down", "down", "down", "a")  # #1 is already promoted
            assert commands(run_dir) == [] and isinstance(app.screen, RefusedModal)
            await press(pilot, "escape", "p", "tab", "enter")
            assert [(c["verb"], c["arg"]) for c in commands(run_dir)] == [("auto_promote", {"on": True})]
            assert "auto-promote -> on (pending)" in app.screen.query_one(DataTable).border_title
            await press(pilot, "P")
            assert commands(run_dir)[-1]["verb"] == "auto_promote"  # not before it is confirmed
            await press(pilot, "tab", "enter")
            assert commands(run_dir)[-1]["verb"] == "pause"
    run(go())


def test_dead_engine_is_reported_and_can_be_resumed(tmp_path):
    run_dir = build_run(tmp_path / "run", status="running", pid=424242)

    async def go():
        app = make_app(run_dir, alive=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            banner = app.screen.query_one(EngineBanner)
            assert banner.display and "pid 424242" in str(banner.render())
            assert "step  12" in str(banner.render())  # the tail of engine.log
            assert "Resume engine" in {c.title for c in app.get_system_commands(app.screen)}
            await press(pilot, "R")
            assert app.spawn.calls == [run_dir] and app.owns_engine
    run(go())


@pytest.mark.parametrize("key", ["S", "P"])
def test_a_dead_engine_takes_no_stop_or_pause(tmp_path, key):
    """No engine would take it, and the next start would (before it expired them) have stopped at once."""
    run_dir = build_run(tmp_path / "run", status="running", pid=424242)

    async def go():
        app = make_app(run_dir, alive=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, key)
            assert isinstance(app.screen, RefusedModal) and commands(run_dir) == []
            assert "R starts it again" in str(app.screen.query_one("#message").render())
    run(go())


def test_crashed_run_shows_its_error(tmp_path):
    run_dir = build_run(tmp_path / "run", status="crashed", pid=None, error="RuntimeError: CUDA out of memory")

    async def go():
        app = make_app(run_dir, alive=False)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4")
            text = str(app.screen.query_one(EngineBanner).render())
            assert "crashed" in text and "CUDA out of memory" in text
    run(go())


def test_hand_edit_of_harness_becomes_a_proposal(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            path = run_dir / "harness.py"
            app.check_harness_edit()  # the file is v2: nothing to propose
            await settle(pilot)
            assert commands(run_dir) == []
            path.write_text(path.read_text() + "\nBROKEN = (\n")
            app.check_harness_edit()
            await settle(pilot)
            assert commands(run_dir) == []  # not valid Python yet
            edited = path.read_text().replace("\nBROKEN = (\n", '\nCURRICULUM["level"] = 2\n')
            path.write_text(edited)
            app.post_message(DataChanged())
            app.check_harness_edit()
            await settle(pilot)
            app.check_harness_edit()  # the same text again: proposed once
            await settle(pilot)
            assert [(c["verb"], c["arg"]) for c in commands(run_dir)] == [("propose_edit", {"code": edited})]
    run(go())


def test_diagnosis_label_opens_its_rollouts(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "3")
            assert app.screen.label == "no_answer_tag"
            assert len(app.screen.query_one("#g-rollouts", DataTable).rows) > 0
            await press(pilot, "o")
            assert type(app.screen).__name__ == "RolloutsScreen" and app.screen.filter.label == "no_answer_tag"
            assert all("no_answer_tag" in r["labels"] for r in app.screen.rows)
    run(go())


@pytest.mark.parametrize("key, verb", [("l", None), ("s", "stop")])
def test_quit_asks_when_this_tui_started_the_engine(run_dir, key, verb):
    async def go():
        app = make_app(run_dir, owns_engine=True)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "q")
            assert isinstance(app.screen, QuitModal)
            await press(pilot, key)
        assert [c["verb"] for c in commands(run_dir)] == ([verb] if verb else [])
        assert app.stop_requested == (verb == "stop")
    run(go())


def test_quit_without_asking_when_attached(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "q")
        assert app.return_code == 0 and commands(run_dir) == []
    run(go())


def test_watchfiles_notices_a_write_by_another_connection(run_dir, monkeypatch):
    import evotui.components.sync as sync

    monkeypatch.setattr(sync, "TICK_S", 3600.0)  # only watchfiles may notice the write

    async def go():
        app = make_app(run_dir, watch=True)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            s = Store.open(run_dir / "run.db")
            s.log("warning", "hello from the engine", step=12)
            s.close()
            for _ in range(200):  # bounded: watchfiles debounces, then one poll
                if any(e["message"] == "hello from the engine" for e in app.state.events):
                    break
                await pilot.pause(0.05)
            assert app.state.events[-1]["message"] == "hello from the engine"
    run(go())


def test_changes_coalesce_into_few_polls(run_dir):
    async def go():
        app = make_app(run_dir)
        polls = []
        original = app._poll
        app._poll = lambda *a, **k: (polls.append(1), original(*a, **k))[1]
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            polls.clear()
            for _ in range(500):
                app.post_message(DataChanged())
            await settle(pilot)
            assert 1 <= len(polls) <= 3
    run(go())


def test_detail_widget_lists_command_states(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "4")
            w = app.screen.query_one(InterventionDetail)
            w.show_commands([{"id": 7, "verb": "approve", "status": "pending", "result": None}])
            assert "pending" in str(w.query_one("#i-command").render())
    run(go())
