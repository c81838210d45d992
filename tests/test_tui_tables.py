"""Tables that stay true (rounds in place, numbers whole) and a queue an operator can read.

The app runs over the frozen fixture run; the test plays the engine by writing
through the real store.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable

from backend.store import Store
from evotui.components.fitted_table import FittedTable
from evotui.components.interventions import FOLD_AFTER_ROUNDS
from tui_fixtures import build_run, make_app, poll, press, settle


def ids(table: DataTable) -> list[int]:
    return [int(k.value) for k in table.rows]


def row_text(table: DataTable, key: str) -> str:
    return " ".join(str(c) for c in table.get_row(key))


def test_a_round_seen_running_is_redrawn_when_it_finishes_newest_on_top(tmp_path):
    """A round first seen `running` stayed so until the TUI restarted; new rounds went to the bottom."""
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="diagnoses")
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            store = Store.open(run_dir / "run.db")
            rid = store.add_round(15, 2, [{"label": "truncated", "count": 3, "share": 0.1, "examples": [1]}], {})
            await poll(pilot)
            rounds = app.screen.query_one("#g-rounds", DataTable)
            assert ids(rounds) == [rid, 2, 1] and "running" in row_text(rounds, str(rid))
            store.finish_round(rid, "truncation again; 2 candidates", [])
            await poll(pilot)
            assert ids(rounds) == [rid, 2, 1] and "truncation again" in row_text(rounds, str(rid))
            with store.tx():  # a change no cursor knows of: F5 reads every round again
                store.update("rounds", 1, {"summary": "rewritten"})
            store.close()
            await press(pilot, "f5")
            assert "rewritten" in row_text(rounds, "1")
    asyncio.run(go())


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_rollout_ids_and_steps_are_never_cut(tmp_path, size):
    """id 1000016 showed as `100001` and step 15478 as `1547`, at both sizes."""
    run_dir = build_run(tmp_path / "run")
    store = Store.open(run_dir / "run.db")
    row = dict(store.get("rollouts", 192), id=1000016, step=15478)  # a long run's newest rollout
    with store.tx():
        store.insert("rollouts", row)
    store.close()

    async def go():
        app = make_app(run_dir, mode="rollouts")
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            table = app.screen.query_one("#r-table", FittedTable)
            assert ids(table)[0] == 1000016
            assert table.widths["id"] >= 7 and table.widths["step"] >= 5
            assert table.get_row("1000016")[:2] == [1000016, 15478]
            if size[0] == 160:
                assert table.size.width > 90  # not half of the screen
    asyncio.run(go())


def test_identical_candidates_collapse_and_old_inconclusive_ones_fold(tmp_path):
    """163 inconclusive candidates waited, the same title up to 6 times."""
    run_dir = build_run(tmp_path / "run")
    store = Store.open(run_dir / "run.db")
    row = dict(store.get("interventions", 6))
    with store.tx():
        for rid in (3, 4, 5, 6):
            store.insert("rounds", {"id": rid, "step": 5 * rid, "created_at": "t", "harness_version": 2,
                                    "failure_table_json": "[]", "metrics_json": "{}", "summary": "done"})
        for iid in (7, 8, 9):  # the same candidate again and again, in the newest round
            store.insert("interventions", dict(row, id=iid, round_id=6, title="Shorter answers"))
    store.close()

    async def go():
        app = make_app(run_dir, mode="interventions")
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            table = app.screen.query_one("#i-table", DataTable)
            assert ids(table) == [3, 9, 5, 4, 2, 1]  # #6 (round 2) folded; 7-9 are one row
            assert row_text(table, "9").count("×3") == 1
            assert "1 old inconclusive folded (i)" in table.border_title and 6 - 2 >= FOLD_AFTER_ROUNDS
            await press(pilot, "i")
            assert ids(table) == [3, 9, 6, 5, 4, 2, 1]
            await press(pilot, "i")
            assert 6 not in ids(table)
    asyncio.run(go())
