"""Keys typed faster than the app handles them: each reaches the screen it was typed at.

`Pilot.press` waits for the app to go idle between keys, which hides the race a
terminal (or tmux `send-keys`) does not: here the key events are posted to the
app all at once, before the first is handled, or 100 ms apart.
"""

from __future__ import annotations

import asyncio
import json

from textual import events

from backend.store import Store
from evotui.components.confirm_modal import ConfirmModal
from evotui.components.interventions import InterventionsScreen
from evotui.components.status_bar import RunStatusBar
from evotui.components.veto_modal import VetoModal
from tui_fixtures import build_run, make_app, press, settle

SIZE = (100, 32)


def commands(run_dir) -> list[tuple[str, dict]]:
    s = Store.open(run_dir / "run.db", readonly=True)
    try:
        return [(c["verb"], json.loads(c["arg_json"])) for c in s.rows("SELECT * FROM commands ORDER BY id")]
    finally:
        s.close()


def key(name: str) -> events.Key:
    return events.Key(name, name if len(name) == 1 else None)


async def type_at_once(pilot, keys: list[str]) -> None:
    """Post every key event to the app before any is handled, as a fast terminal delivers them."""
    for name in keys:
        pilot.app.post_message(key(name))
    await settle(pilot)


async def type_apart(pilot, keys: list[str], gap_s: float = 0.1) -> None:
    for name in keys:
        pilot.app.post_message(key(name))
        await pilot.pause(gap_s)
    await settle(pilot)


def test_p_tab_enter_twice_at_once_toggles_auto_promote_on_then_off(tmp_path):
    """It crashed the app (the first dialog was dismissed twice: ScreenStackError)."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await type_at_once(pilot, ["p", "tab", "enter", "p", "tab", "enter"])
            assert app.is_running and isinstance(app.screen, InterventionsScreen)
            assert commands(run_dir) == [("auto_promote", {"on": True}), ("auto_promote", {"on": False})]
            assert "auto-promote off" in app.screen.query_one("#i-table").border_title  # where it ends up
    asyncio.run(go())


def test_p_tab_enter_100ms_apart_loses_no_key(tmp_path):
    """With 100-150 ms between keys, the second `p` went to the closing dialog and was lost."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await type_apart(pilot, ["p", "tab", "enter", "p", "tab", "enter", "p", "tab", "enter"])
            assert commands(run_dir) == [("auto_promote", {"on": True}), ("auto_promote", {"on": False}),
                                         ("auto_promote", {"on": True})]
            assert "auto-promote -> on (pending)" in app.screen.query_one("#i-table").border_title
            assert "auto-promote -> on (pending)" in str(app.screen.query_one(RunStatusBar).render())
    asyncio.run(go())


def test_pause_then_resume_at_once(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await type_at_once(pilot, ["P", "tab", "enter", "P", "tab", "enter"])
            assert app.is_running and [c[0] for c in commands(run_dir)] == ["pause", "resume"]
    asyncio.run(go())


def test_a_veto_typed_at_once_keeps_its_whole_reason(tmp_path):
    """The reason's first letters arrive before the dialog has focused its field: they wait for it."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await type_at_once(pilot, ["v", *"too risky", "enter", "4"])
            assert commands(run_dir) == [("veto", {"id": 3, "reason": "too risky"})]
            assert isinstance(app.screen, InterventionsScreen)
    asyncio.run(go())


def test_a_dialog_is_dismissed_once(tmp_path):
    """Two clicks, or a click and a key, on a closing dialog: one answer, one pop."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            answers = []
            app.push_screen(ConfirmModal("t", "m"), answers.append)
            await settle(pilot)
            dialog = app.screen
            dialog.choose("confirm")
            dialog.choose("cancel")
            dialog.action_cancel()
            await settle(pilot)
            assert answers == [True] and app.is_running and len(app.screen_stack) == 1
    asyncio.run(go())


def test_a_letter_a_dialog_has_no_use_for_is_dropped_visibly(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "p", "2")
            assert isinstance(app.screen, ConfirmModal)
            assert "'2' does nothing here" in str(app.screen.query_one(".hint").render())
            await press(pilot, "escape")
            assert isinstance(app.screen, InterventionsScreen) and commands(run_dir) == []
    asyncio.run(go())


def test_veto_dialog_keeps_the_cursor_keys_for_its_field(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)  # the queue is read first; before it, nothing is selected
            await press(pilot, "v")
            await pilot.press(*"ab", "left", "x", "space")
            await settle(pilot)
            assert isinstance(app.screen, VetoModal) and app.screen.query_one("#reason").value == "ax b"
    asyncio.run(go())


def test_a_click_on_a_dialog_button_answers_it(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            answers = []
            app.push_screen(ConfirmModal("t", "m"), answers.append)
            await settle(pilot)
            await pilot.click("#confirm")
            await settle(pilot)
            assert answers == [True] and len(app.screen_stack) == 1
    asyncio.run(go())
