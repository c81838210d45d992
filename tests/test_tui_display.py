"""What the screens draw: honest sparklines, a header that keeps what matters, columns that fit,
backtests as rows, and a version table that follows a promotion."""

from __future__ import annotations

import asyncio

from textual.content import Content

from backend.store import Store
from evotui.components.backtest_view import backtests
from evotui.components.fitted_table import Col, fit
from evotui.components.metrics_panel import FROM_ZERO, SPAN, UNIT, spark, value_range
from evotui.components.status_bar import fit_header, header_parts
from evotui.engine_process import EngineHealth
from tui_fixtures import build_run, make_app, poll, press, settle

RUN = {"status": "running", "activity": "held-out eval 12/32", "name": "demo", "step": 12, "steps_total": 20,
       "policy_version": 12, "harness_version": 2, "val_acc": 0.4375, "test_acc": 0.40625, "auto_promote": 1}


def test_a_sparkline_is_drawn_against_the_metrics_range():
    assert spark([0.156], *value_range([0.156], UNIT), 40) == "▂"  # one point is not a full bar
    assert spark([1.0], *value_range([1.0], UNIT), 40) == "█"
    assert spark([0.5, 0.5, 0.5], *value_range([0.5] * 3, UNIT), 40) == "▅▅▅"  # flat stays mid-height
    assert value_range([310.0, 382.0], FROM_ZERO) == (0.0, 382.0)
    assert value_range([-0.5, 0.3], SPAN) == (-0.5, 1.0)
    newest = spark(list(range(100)), 0, 99, 10)  # the newest that fit, one column each
    assert len(newest) == 10 and newest[-1] == "█" and newest[0] == "▇"


def test_the_header_keeps_status_step_held_out_and_auto_promote_at_80_columns():
    parts = header_parts(RUN, EngineHealth())
    wide = fit_header(parts, 158).plain
    assert "policy v12" in wide and "demo" in wide and "auto-promote on" in wide
    narrow = fit_header(parts, 78).plain
    assert len(narrow) <= 78
    for kept in ("running", "step 12/20", "val 0.438", "test 0.406", "auto on"):
        assert kept in narrow, narrow
    tiny = fit_header(parts, 44).plain
    assert len(tiny) <= 44 and "val 0.44" in tiny and tiny.startswith("● running")


def test_columns_share_the_width_and_the_least_important_go_first():
    cols = [Col("id", "id", 3), Col("title", "title", 20, grow=3), Col("effect", "effect", 23, priority=1),
            Col("kind", "kind", 10, priority=3), Col("note", "note", 10, grow=1, priority=2)]
    wide = fit(cols, 150)
    assert set(wide) == {"id", "title", "effect", "kind", "note"} and sum(w + 2 for w in wide.values()) == 150
    assert abs((wide["title"] - 20) - 3 * (wide["note"] - 10)) <= 3  # spare room split 3:1
    assert set(fit(cols, 76)) == {"id", "title", "effect", "kind", "note"}  # least widths: 76 cells
    narrow = fit(cols, 60)
    assert list(narrow) == ["id", "title", "effect"] and narrow["title"] == 60 - 5 - 25 - 2


def test_a_backtest_reads_as_rows_not_json():
    decision = {"metric": "recall", "effect": 0.21, "ci_low": 0.05, "ci_high": 0.37, "p_value": 0.012, "n": 48,
                "status": "inconclusive", "underpowered": True, "mde": 0.31,
                "harm": {"metric": "accuracy", "effect": -0.01, "ci_low": -0.04, "ci_high": 0.02, "p_value": 0.6,
                         "n": 48}}
    text = backtests([{"mode": "replay", "verdict": "inconclusive", "n_rollouts": 600, "ms": 812.0, "reason": "r",
                       "metrics": {"decision": decision, "incumbent_version": 3, "agreement_old": 0.61,
                                   "agreement_new": 0.64, "revived": 4, "fixed_ids": list(range(1, 40)),
                                   "invalid": {"tests_edited": {"high_old": 0, "high_new": 1, "n": 7}}}}]).plain
    lines = text.splitlines()
    assert lines[0].startswith("replay over 600 rollouts vs v3: inconclusive")
    assert "recall" in lines[1] and "+0.210  95% CI [+0.050, +0.370]  p 0.012  n 48" in lines[1]
    assert "harm guard: accuracy" in lines[2] and "-0.010" in lines[2]
    assert "detects gains of 0.310" in lines[3]
    assert any("agreement" in ln and "0.610 → 0.640  (+0.030)" in ln for ln in lines)
    assert any("fixed_ids" in ln and "(39 in all)" in ln for ln in lines)
    assert any(ln.strip().startswith("high") and "0 → 1  (+1)" in ln for ln in lines)  # nested pairs fold too
    assert "{" not in text and "decision" not in text


def test_the_version_table_follows_a_promotion(tmp_path):
    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            table = app.screen.query_one("#h-table")
            assert table.get_row("2")[0] == "●2" and str(table.get_row("1")[2]) == "superseded"
            writer = Store.open(run_dir / "run.db")  # the engine promotes intervention 3 as v3
            with writer.tx():
                writer.conn.execute("UPDATE harness_versions SET status = 'superseded' WHERE status = 'active'")
                writer.conn.execute("UPDATE harness_versions SET status = 'active' WHERE id = 3")
                writer.conn.execute("UPDATE interventions SET status = 'promoted' WHERE id = 3")
                writer.update("runs", 1, {"harness_version": 3})
            writer.close()
            await poll(pilot)
            assert table.get_row("3")[0] == "●3" and str(table.get_row("3")[2]) == "active"
            assert table.get_row("2")[0] == " 2" and str(table.get_row("2")[2]) == "superseded"
            await press(pilot, "4")
            assert str(app.screen.query_one("#i-table").get_row("3")[1]).startswith("promoted")
    asyncio.run(go())


def test_an_empty_run_says_what_will_come(tmp_path):
    from tui_fixtures import build_empty_run

    async def go():
        app = make_app(build_empty_run(tmp_path / "run"))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await press(pilot, "4")
            head = app.screen.query_one("#i-head").render()
            assert "No interventions yet: the first evolution round runs after step 5." in str(head)
    asyncio.run(go())


def test_content_is_plain_text_for_the_header():
    assert isinstance(fit_header(header_parts({}, EngineHealth()), 80), Content)


def test_an_edit_of_the_draft_is_proposed_once(tmp_path):
    from backend.harness import run_file

    run_dir = build_run(tmp_path / "run")

    async def go():
        app = make_app(run_dir, mode="harness")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            draft = run_file.start_draft(run_dir)  # what `e` opens: a copy of the active version
            app.check_harness_edit()
            await settle(pilot)
            edited = draft.read_text() + '\nCURRICULUM["level"] = 2\n'
            draft.write_text(edited)
            app.check_harness_edit()
            await settle(pilot)
            app.check_harness_edit()  # the same text again: proposed once
            await settle(pilot)
            await press(pilot, "d", "d")  # the harness screen says where the draft is
            assert "harness.draft.py" in str(app.screen.query_one("#h-head").render())
        store = Store.open(run_dir / "run.db", readonly=True)
        sent = store.rows("SELECT verb, arg_json FROM commands")
        store.close()
        assert [c["verb"] for c in sent] == ["propose_edit"] and "CURRICULUM" in sent[0]["arg_json"]
        assert (run_dir / "harness.py").read_text() != edited  # harness.py is still the active version
    asyncio.run(go())
