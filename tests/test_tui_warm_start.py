"""The app's warm start (`evotui open`): the rollouts screen built ahead, the heap frozen, and a
screen that comes back restyled only when something its styles depend on changed."""

from __future__ import annotations

import asyncio
import gc

import pytest
from textual.widgets import DataTable

from evotui.components.rollouts import RolloutsScreen
from tui_fixtures import build_run, make_app, press, settle

SIZE = (100, 32)


@pytest.fixture
def run_dir(tmp_path):
    return build_run(tmp_path / "run")


def test_warm_start_builds_the_rollouts_screen_before_its_first_visit(run_dir):
    async def go():
        app = make_app(run_dir, warm_start=True)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot)
                assert app.prebuilt and gc.get_freeze_count() > 0
                assert type(app.screen).__name__ == "DashboardScreen"  # built, not shown
                assert app.focused is not None and app.focused.screen is app.screen
                await pilot.press("2")  # no settle: the page must be there already
                screen = app.screen
                assert isinstance(screen, RolloutsScreen) and screen.settled()
                assert [int(k.value) for k in screen.query_one(DataTable).rows][:3] == [192, 191, 190]
                assert "rollout 192" in str(screen.query_one("#d-head").render())
                await settle(pilot)
                assert app.focused is screen.query_one(DataTable)
                await press(pilot, "c", "slash", *"calc", "enter", "escape")  # it works as a built one
                assert screen.filter.text == "calc" and {r["domain"] for r in screen.rows} == {"swe"}
        finally:
            gc.unfreeze()
    asyncio.run(go())


def test_without_warm_start_nothing_is_built_ahead_or_frozen(run_dir):
    async def go():
        frozen = gc.get_freeze_count()
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not app.prebuilt and gc.get_freeze_count() == frozen
            await press(pilot, "2")
            assert len(app.screen.rows) == 50
    asyncio.run(go())


def test_a_screen_coming_back_is_restyled_only_when_its_styles_may_have_changed(run_dir):
    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "2")
            screen = app.screen
            restyled = []
            update = screen.update_node_styles
            screen.update_node_styles = lambda *a, **k: (restyled.append(1), update(*a, **k))[1]
            await press(pilot, "1", "2")
            assert restyled == []  # nothing changed while it was away
            await press(pilot, "1")
            app.add_class("probe")  # an app class a rule could select on
            await press(pilot, "2")
            assert restyled
            table = screen.query_one(DataTable)
            dark = table.styles.background
            await press(pilot, "1")
            app.theme = "textual-light"
            await press(pilot, "2")
            assert table.styles.background != dark  # the new theme reached the screen that was away
    asyncio.run(go())
