"""The TUI's read queries (backend/store/views.py), without Textual: paging, filters, deltas."""

from __future__ import annotations

import pytest

from backend.store import Store
from backend.store.views import (
    PAGE, PollCursor, RolloutFilter, RunReader, distinct_values, filter_choices, harness_code_known,
    intervention_detail, label_rollouts, read_delta, rollout_detail, rollout_page, rollouts_by_ids, skills,
    tail_file,
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


def test_details_and_search(store):
    d = intervention_detail(store, 3)
    assert d["status"] == "passed" and d["backtests"][0]["metrics"]["agreement_new"] == 0.83
    assert d["skills"] == ["format-reward-bump", "answer-tag-first"]
    assert [s["name"] for s in skills(store, "no_answer")] == ["format-reward-bump", "answer-tag-first"]
    assert all(r["evidence"] for r in label_rollouts(store, "truncated", 1, 5))
    assert [r["id"] for r in rollouts_by_ids(store, [3, 1, 2])] == [3, 2, 1]
    code = store.scalar("SELECT code FROM harness_versions WHERE id = 2")
    assert harness_code_known(store, code) and not harness_code_known(store, code + "\n# edit\n")


def test_tail_file(tmp_path):
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert tail_file(p, 3) == ["line 997", "line 998", "line 999"]
    assert tail_file(p, 3, max_bytes=30)[-1] == "line 999"
    assert tail_file(tmp_path / "missing") == []
