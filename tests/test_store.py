"""The store: migrations on a blank database, the schema, atomic steps, errors."""

import sqlite3

import pytest

from backend.store import Store, StoreError, integrity_ok
from backend.store.schema import TABLES


def test_blank_database_migrates_to_full_schema(tmp_path):
    s = Store.open(tmp_path / "run.db")
    names = set(s.db.table_names())
    assert set(TABLES) <= names
    cols = {c.name for c in s.db["rollouts"].columns}
    for c in ("task_id", "group_idx", "prompt", "completion", "prompt_tokens", "completion_tokens", "reward",
              "rewards_json", "verdict", "correct", "finish", "harness_version", "policy_version", "gen_ms"):
        assert c in cols
    step_cols = {c.name for c in s.db["steps"].columns}
    for c in ("gen_ms", "score_ms", "diagnose_ms", "train_ms", "store_ms", "dead_group_frac", "agreement"):
        assert c in step_cols
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # opening again applies nothing new and keeps the data
    s.create_run("r", {"domain": "math"}, 0, 3)
    s.close()
    s2 = Store.open(tmp_path / "run.db")
    assert s2.run()["name"] == "r"


def test_newer_schema_is_refused(tmp_path):
    s = Store.open(tmp_path / "run.db")
    s.db["_sqlite_migrations"].insert({"migration_set": "evotui", "name": "m999_future", "applied_at": "x"})
    s.close()
    with pytest.raises(StoreError, match="newer evotui"):
        Store.open(tmp_path / "run.db")


def test_foreign_database_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "other.db")
    conn.execute("create table invoices (id int)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an evotui run"):
        Store.open(tmp_path / "other.db")


def test_missing_run_is_clear(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "nope", create=False)


def test_commit_step_is_atomic(tmp_path):
    s = Store.open(tmp_path / "run.db")
    s.create_run("r", {"domain": "math"}, 0, 3)
    step = {"step": 1, "n_rollouts": 1}
    rows = [{"step": 1, "completion": "x", "reward": 1.0}]
    ids = s.commit_step(step, rows, [[{"step": 1, "label": "no_answer_tag", "evidence": "e"}]]).rollout_ids
    assert s.count("rollouts") == 1 and s.count("diagnoses") == 1 and s.last_step() == 1
    assert s.get("diagnoses", 1)["rollout_id"] == ids[0]
    # a failing step (duplicate step row) leaves nothing of itself behind
    with pytest.raises(sqlite3.IntegrityError):
        s.commit_step(step, rows, [[]])
    assert s.count("rollouts") == 1
    assert integrity_ok(tmp_path / "run.db")


def test_a_step_larger_than_one_statement_stores_every_row_as_one_statement_would(tmp_path):
    """Rows go in as few multi-row statements as SQLite's parameter limit allows: a limit that
    splits the step into several statements stores the same rows, ids, diagnoses and full-text
    index as one statement."""
    stored = []
    for name, limit in (("one", None), ("split", 16)):
        s = Store.open(tmp_path / f"{name}.db")
        s.create_run("r", {"domain": "math"}, 0, 3)
        if limit:
            s.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)  # 3 columns: 5 rows a statement
        rows = [{"step": 1, "completion": f"answer {i} " + ("unusual" if i == 11 else "plain")} for i in range(12)]
        rows[3]["reward"] = 0.5  # a key only one row has: the others store NULL
        diags = [[{"step": 1, "label": f"l{i}"}] * (i % 3) for i in range(12)]
        ids = s.commit_step({"step": 1, "n_rollouts": 12}, rows, diags).rollout_ids
        assert ids == list(range(1, 13))
        hits = s.rows("SELECT rowid FROM rollouts_fts WHERE rollouts_fts MATCH 'unusual'")
        stored.append((s.rows("SELECT id, step, completion, reward FROM rollouts ORDER BY id"),
                       s.rows("SELECT rollout_id, label FROM diagnoses ORDER BY id"), hits))
        s.close()
    assert stored[0] == stored[1]
    assert stored[0][2] == [{"rowid": 12}] and stored[0][0][3]["reward"] == 0.5 and stored[0][0][4]["reward"] is None
    assert len(stored[0][1]) == sum(i % 3 for i in range(12))


def test_the_store_numbers_policy_versions(tmp_path):
    """A step's new policy version takes the next unused id, whatever the run's current policy
    (after a rollback an older one); the step row and the run point at it."""
    s = Store.open(tmp_path / "run.db")
    s.create_run("r", {"domain": "math"}, 0, 5)

    def commit(step: int, parent: int | None):
        pv = {"parent": parent, "step": step, "checkpoint": f"c{step}", "created_at": "t"}
        return s.commit_step({"step": step, "n_rollouts": 0, "policy_version": parent}, [], [], None, pv)

    assert [commit(1, None).policy_version, commit(2, 1).policy_version, commit(3, 2).policy_version] == [1, 2, 3]
    s.set_run(policy_version=1)  # a rollback to version 1
    assert commit(4, 1).policy_version == 4
    assert [(r["id"], r["parent"]) for r in s.rows("SELECT * FROM policy_versions")] == \
        [(1, None), (2, 1), (3, 2), (4, 1)]
    assert s.rows("SELECT policy_version FROM steps WHERE step = 4") == [{"policy_version": 4}]
    assert s.run()["policy_version"] == 4 and s.current_policy_version()["step"] == 4
    assert s.commit_step({"step": 5, "n_rollouts": 0, "policy_version": 4}, [], []).policy_version is None
    assert s.run()["policy_version"] == 4  # a step that saved nothing leaves the run's policy as it was
    with pytest.raises(ValueError, match="id from the store"):
        s.commit_step({"step": 6, "n_rollouts": 0}, [], [], None, {"id": 9, "step": 6})
    assert s.last_step() == 5


def test_commands_roundtrip(tmp_path):
    s = Store.open(tmp_path / "run.db")
    cid = s.send_command("approve", {"id": 3})
    assert [c["verb"] for c in s.pending_commands()] == ["approve"]
    s.ack_command(cid, "applied", "ok")
    assert s.pending_commands() == []
    assert s.get("commands", cid)["status"] == "applied"


def test_rows_in_binds_a_list_and_leaves_other_braces_alone(tmp_path):
    s = Store.open(tmp_path / "run.db")
    ids = [s.send_command("approve", {"id": i}) for i in range(3)]
    sql = "SELECT id, arg_json FROM commands WHERE id IN ({ids}) AND arg_json LIKE '{%' ORDER BY id"
    assert [r["id"] for r in s.rows_in(sql, ids[1:])] == ids[1:]
    assert s.rows_in(sql, []) == []
