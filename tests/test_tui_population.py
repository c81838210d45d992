"""Pilot tests of the population screen (`evotui open POP`): members, curves, lineage, and the
operator's approve and veto of a pending explore move, written to population.sqlite.

The fixture (tests/population_fixtures.py): three members compared at steps 2 and 4, m1 best;
event #1 a copy m1 -> m0 (applied, won), #2 m0's move (pending when supervised)."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from backend.population.store import PopulationStore
from evotui.components.confirm_modal import ConfirmModal
from evotui.components.metric_plot import MetricPlot
from evotui.components.population_app import PopulationApp
from evotui.components.population_screen import PopulationScreen
from population_fixtures import build_population
from tui_fixtures import press, settle

SIZE = (140, 40)


def status_of(pop, eid: int) -> str:
    ps = PopulationStore.open(pop, readonly=True)
    try:
        return ps.event(eid).status
    finally:
        ps.close()


def cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def notes(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def opened(pilot) -> PopulationScreen:
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, PopulationScreen)
    return screen


def test_the_screen_shows_members_curves_and_lineage(tmp_path):
    pop = build_population(tmp_path / "pop")

    async def go():
        app = PopulationApp(pop, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            screen = await opened(pilot)
            members = cells(screen.query_one("#members", DataTable))
            assert members[0] == ["m0", "0", "4/4", "v2", "0.600", "[0.387, 0.781]", "20", "m1", "finished"]
            assert members[1][0] == "m1 *"  # the reported member: best on validation at the last comparison
            events = cells(screen.query_one("#events", DataTable))
            assert events[0][:6] == ["1", "2", "copy", "m0", "m1", "applied"]
            assert events[0][6] == "-0.500 [-0.700, -0.300] n 20" and events[0][8].startswith("won +0.400")
            assert events[1][5:8] == ["pending", "-0.500 [-0.700, -0.300] n 20", "sampling.temperature 1.0 → 1.2"]
            plot = screen.query_one("#curves", MetricPlot)
            assert "m2" in str(plot.border_subtitle) and not plot._message
            assert "1 move(s) pending" in str(screen.query_one("#summary").render())
    asyncio.run(go())


def test_approve_asks_then_writes_approved_and_bad_keys_only_notify(tmp_path):
    pop = build_population(tmp_path / "pop")

    async def go():
        app = PopulationApp(pop, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await press(pilot, "a")  # the cursor is on #1, a copy: nothing is asked or written
            assert not isinstance(app.screen, ConfirmModal)
            assert any("#1 is a copy" in n for n in notes(app))
            await press(pilot, "down", "a")
            assert isinstance(app.screen, ConfirmModal)
            assert "Approve move #2?" in str(app.screen.query_one("#title").render())
            await press(pilot, "enter")  # Enter on its own cancels
            assert status_of(pop, 2) == "pending"
            await press(pilot, "a", "tab", "enter")
            assert status_of(pop, 2) == "approved"
            assert any("move #2 approved" in n for n in notes(app))
            events = cells(app.screen.query_one("#events", DataTable))
            assert events[1][5] == "approved"  # read again after the decision
            await press(pilot, "v")  # no longer pending: refused before any dialog
            assert not isinstance(app.screen, ConfirmModal)
            assert any("move #2 is approved; only a pending move can be vetoed" in n for n in notes(app))
    asyncio.run(go())


def test_veto_writes_vetoed(tmp_path):
    pop = build_population(tmp_path / "pop")

    async def go():
        app = PopulationApp(pop, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await press(pilot, "down", "v", "tab", "enter")
            assert status_of(pop, 2) == "vetoed"
    asyncio.run(go())


def test_an_autonomous_population_takes_no_decision(tmp_path):
    pop = build_population(tmp_path / "pop", auto=True)

    async def go():
        app = PopulationApp(pop, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await press(pilot, "down", "a")
            assert not isinstance(app.screen, ConfirmModal)
            assert any("autonomous" in n for n in notes(app))
            assert status_of(pop, 2) == "applied"
    asyncio.run(go())


def test_the_cli_approves_and_vetoes_a_population_move(tmp_path, capsys):
    from evotui.cli import main

    pop = build_population(tmp_path / "pop")
    assert main(["veto", str(pop), "1", "--reason", "no"]) == 2  # a copy
    assert "has no move #1" in capsys.readouterr().err
    assert main(["approve", str(pop), "2", "--rebase"]) == 2
    assert main(["approve", str(pop), "2"]) == 0
    assert "move #2 approved" in capsys.readouterr().out
    assert status_of(pop, 2) == "approved"
