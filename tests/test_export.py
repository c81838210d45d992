"""`evotui export RUN_DIR --format jsonl|parquet`: every rollout with its diagnoses
and verdict, one uniform record shape (what `datasets.load_dataset("json"/"parquet")` needs);
JSON Lines without pyarrow, Parquet with it, and a clear line when it is missing."""

from __future__ import annotations

import json
import sys

import pytest

from evotui.cli import main


def _run(tmp_path):
    from synthetic_run import build_run

    store = build_run(tmp_path / "run" / "run.db", steps=3)
    store.close()
    return tmp_path / "run"


def test_jsonl_holds_every_rollout_with_its_diagnoses_and_verdict(tmp_path, capsys):
    from backend.store import Store

    run = _run(tmp_path)
    assert main(["export", str(run)]) == 0
    path = run / "export" / "rollouts.jsonl"
    assert f"48 rollouts written to {path}" in capsys.readouterr().out
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    store = Store.open(run, readonly=True)
    rows = store.rollouts_page(0, 1000)
    assert [r["id"] for r in recs] == [r["id"] for r in rows] and len(recs) == 48
    assert len({tuple(r) for r in recs}) == 1  # every record has the same fields, in the same order
    diagnosed = next(r for r in recs if r["diagnoses"])
    stored = store.diagnoses_of([diagnosed["id"]])
    assert [(d["label"], d["evidence"], d["validity"]) for d in diagnosed["diagnoses"]] == \
        [(d["label"], d["evidence"], bool(d["validity"])) for d in stored]
    assert diagnosed["labels"] == sorted({d["label"] for d in stored})
    row = next(r for r in rows if r["id"] == diagnosed["id"])
    assert diagnosed["verdict"] == row["verdict"] and diagnosed["correct"] == bool(row["correct"])
    assert diagnosed["reward"] == row["reward"] and diagnosed["question"].startswith("What is")
    assert {t["name"] for t in diagnosed["reward_terms"]} == set(json.loads(row["rewards_json"]))
    assert sum(r["trained"] for r in recs) == sum(bool(r["kept"]) and r["advantage"] != 0 for r in rows)


def test_parquet_without_pyarrow_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    run = _run(tmp_path)
    assert main(["export", str(run), "--format", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "needs pyarrow" in err and "--format jsonl" in err and "Traceback" not in err
    assert not (run / "export" / "rollouts.parquet").exists()


def test_parquet_round_trips_when_pyarrow_is_there(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    run = _run(tmp_path)
    assert main(["export", str(run), "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 0
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == 48 and "diagnoses" in table.column_names


def test_export_of_a_non_run_is_a_user_error(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "not an evotui run directory" in capsys.readouterr().err
