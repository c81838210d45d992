"""The TUI's read queries (backend/store/reader.py), without Textual: paging, filters, deltas."""

from __future__ import annotations

import pytest

from sqlite_utils import Database

from backend.store import Store
from backend.store.schema import MIGRATIONS
from backend.store.reader import (
    PAGE, PollCursor, RolloutFilter, RunDB, RunReader, code_proposed, distinct_values, filter_choices, fts_phrase,
    harness_code_known, has_fts, intervention_detail, label_rollouts, read_delta, rollout_detail, rollout_page,
    rollouts_by_ids, skills, tail_file,
)
from tui_fixtures import build_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("views") / "run")


@pytest.fixture
def store(run_dir):
    s = Store.open(run_dir / "run.db", readonly=True)
    yield s
    s.close()


def all_pages(store, flt):
    rows, before = [], None
    while True:
        page = rollout_page(store, flt, before=before)
        rows += page
        if len(page) < PAGE:
            return rows
        before = page[-1]["id"]


@pytest.mark.parametrize("flt, where, params", [
    (RolloutFilter(), "1", ()),
    (RolloutFilter(domain="code"), "domain = ?", ("code",)),
    (RolloutFilter(verdict="wrong"), "verdict = ?", ("wrong",)),
    (RolloutFilter(harness_version=1), "harness_version = ?", (1,)),
    (RolloutFilter(reward_min=0.5), "reward >= ?", (0.5,)),
    (RolloutFilter(reward_max=0.05), "reward <= ?", (0.05,)),
    (RolloutFilter(text="calc/ops"), "completion LIKE ?", ("%calc/ops%",)),
    (RolloutFilter(text="CALC ops"), "completion LIKE ?", ("%calc/ops%",)),
    (RolloutFilter(text="add", domain="math"), "domain = 'math' AND completion LIKE ?", ("% add %",)),
    (RolloutFilter(text="tens, then", label="wrong_value"), "completion LIKE ? AND id IN "
     "(SELECT rollout_id FROM diagnoses WHERE label = 'wrong_value')", ("%tens, then%",)),
    (RolloutFilter(text="test_op*"), "prompt LIKE ?", ("%test_op%",)),
    (RolloutFilter(label="truncated"), "id IN (SELECT rollout_id FROM diagnoses WHERE label = ?)", ("truncated",)),
    (RolloutFilter(label="wrong_value", domain="math", reward_max=0.5),
     "domain = 'math' AND reward <= 0.5 AND id IN (SELECT rollout_id FROM diagnoses WHERE label = ?)",
     ("wrong_value",)),
])
def test_keyset_pages_match_a_plain_query(store, flt, where, params):
    expected = [r["id"] for r in store.rows(f"SELECT id FROM rollouts WHERE {where} ORDER BY id DESC", params)]
    got = [r["id"] for r in all_pages(store, flt)]
    assert got == expected and got


def test_text_filter_escapes_like_wildcards(store):
    assert rollout_page(store, RolloutFilter(text="100%_")) == []
    assert rollout_page(store, RolloutFilter(text="%")) == []  # no word: a substring scan, % taken literally
    assert len(rollout_page(store, RolloutFilter(text="<answer>"))) == PAGE  # the words of the tag


def test_search_text_becomes_one_fts_phrase():
    assert fts_phrase("calc/ops") == '"calc ops"'
    assert fts_phrase(' need* ') == '"need"*'
    assert fts_phrase('say "hi" OR NEAR(x)') == '"say hi OR NEAR x"'  # operators and quotes are words here
    assert fts_phrase("%$ ") is None


def test_a_run_written_before_the_text_index_is_searched_and_then_indexed(tmp_path):
    db = Database(tmp_path / "run.db")
    MIGRATIONS.apply(db, stop_before="m007_rollouts_fts")  # an older evotui's run
    db["rollouts"].insert_all([{"id": i, "step": 1, "prompt": f"What is {i} + 1?", "completion": text}
                               for i, text in enumerate(["the answer is 42", "I think forty-two", "42"], 1)])
    db.conn.close()
    old = RunDB(tmp_path / "run.db")  # the TUI reads it as it is (readers never migrate)
    assert not has_fts(old) and [r["id"] for r in rollout_page(old, RolloutFilter(text="forty"))] == [2]
    old.close()
    Store.open(tmp_path / "run.db").close()  # the engine (or any writer) opens it: m007 backfills
    new = RunDB(tmp_path / "run.db")
    assert has_fts(new)
    assert [r["id"] for r in rollout_page(new, RolloutFilter(text="forty two"))] == [2]
    assert [r["id"] for r in rollout_page(new, RolloutFilter(text="42"))] == [3, 1]
    new.close()
    writer = Store.open(tmp_path / "run.db")  # new rows are indexed by the triggers, in the same transaction
    with writer.tx():
        writer.insert("rollouts", {"id": 4, "step": 2, "prompt": "p", "completion": "forty-two again"})
        writer.conn.execute("UPDATE rollouts SET completion = 'no longer' WHERE id = 2")
        writer.conn.execute("DELETE FROM rollouts WHERE id = 3")
    assert [r["id"] for r in rollout_page(writer, RolloutFilter(text="forty two"))] == [4]
    assert [r["id"] for r in rollout_page(writer, RolloutFilter(text="42"))] == [1]
    writer.close()


def test_newer_rows_after_a_key(store):
    newest = rollout_page(store, RolloutFilter(), limit=5)
    assert [r["id"] for r in rollout_page(store, RolloutFilter(), after=newest[-1]["id"])] == \
        [r["id"] for r in newest[:-1]]


def test_rollout_detail_has_group_labels_and_turns(store):
    swe = rollout_page(store, RolloutFilter(domain="swe"), limit=1)[0]
    d = rollout_detail(store, swe["id"])
    assert len(d["group"]) == 4 and {g["idx"] for g in d["group"]} == {0, 1, 2, 3}
    assert [t["tool"] for t in d["turns"]] == ["read", "run_tests", "submit"]
    assert set(d["rewards"]) == {"correct", "format"}
    assert rollout_detail(store, 10**9) is None


def test_filter_choices_skip_through_indexes(store):
    c = filter_choices(store)
    assert c.domains == ["math", "code", "swe"]
    assert c.harness_versions == [1, 2]
    assert "truncated" in c.labels and c.labels == sorted(c.labels)
    assert distinct_values(store, "rollouts", "verdict") == ["correct", "failed", "passed", "wrong"]


def test_read_delta_returns_only_new_rows(run_dir, tmp_path):
    run = build_run(tmp_path / "run")
    reader = RunReader.open(run)
    first = reader.call(read_delta, PollCursor())
    assert len(first.steps) == 12 and first.interventions and first.max_rollout_id == 192
    assert reader.call(read_delta, first.cursor) is None  # nothing committed since
    writer = Store.open(run / "run.db")
    cid = writer.send_command("pause")
    second = reader.call(read_delta, first.cursor)
    assert second.steps == [] and second.interventions is None and [c["id"] for c in second.commands] == [cid]
    assert second.cursor.pending == (cid,)
    writer.ack_command(cid, "applied", "paused")
    third = reader.call(read_delta, second.cursor)
    assert third.commands[0]["status"] == "applied" and third.cursor.pending == ()
    writer.close()
    reader.close()


def test_a_status_change_of_an_old_row_reaches_the_next_poll(tmp_path):
    """A promotion supersedes the active version and moves an intervention on: both tables come
    back whole, so no screen keeps "active" on a superseded version or "passed" on a promoted one."""
    run = build_run(tmp_path / "run")
    reader = RunReader.open(run)
    first = reader.call(read_delta, PollCursor())
    assert {v["id"]: v["status"] for v in first.versions} == {1: "superseded", 2: "active", 3: "candidate"}
    writer = Store.open(run / "run.db")
    with writer.tx():
        writer.conn.execute("UPDATE harness_versions SET status = 'superseded' WHERE status = 'active'")
        writer.conn.execute("UPDATE harness_versions SET status = 'active' WHERE id = 3")
        writer.conn.execute("UPDATE interventions SET status = 'promoted' WHERE id = 3")  # updated_at kept
    second = reader.call(read_delta, first.cursor)
    assert {v["id"]: v["status"] for v in second.versions} == {1: "superseded", 2: "superseded", 3: "active"}
    assert {r["id"]: r["status"] for r in second.interventions}[3] == "promoted"
    writer.send_command("pause")  # a change elsewhere: the small tables are not sent again
    third = reader.call(read_delta, second.cursor)
    assert third.versions is None and third.interventions is None
    writer.close()
    reader.close()


def test_details_and_search(store):
    d = intervention_detail(store, 3)
    assert d["status"] == "passed" and d["backtests"][0]["metrics"]["agreement_new"] == 0.83
    assert d["skills"] == ["format-reward-bump", "answer-tag-first"]
    assert [s["name"] for s in skills(store, "no_answer")] == ["format-reward-bump", "answer-tag-first"]
    assert all(r["evidence"] for r in label_rollouts(store, "truncated", 1, 5))
    assert [r["id"] for r in rollouts_by_ids(store, [3, 1, 2])] == [3, 2, 1]
    code = store.scalar("SELECT code FROM harness_versions WHERE id = 2")
    assert harness_code_known(store, code) and not harness_code_known(store, code + "\n# edit\n")
    candidate = store.scalar("SELECT code FROM interventions WHERE code IS NOT NULL LIMIT 1")
    assert not code_proposed(store, code + "\n# edit\n") and (candidate is None or code_proposed(store, candidate))


def test_tail_file(tmp_path):
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert tail_file(p, 3) == ["line 997", "line 998", "line 999"]
    assert tail_file(p, 3, max_bytes=30)[-1] == "line 999"
    assert tail_file(tmp_path / "missing") == []
