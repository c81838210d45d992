"""The out-of-distribution test: a code run on generated tasks evaluates HumanEval beside its
validation and test sets when `eval.n_ood` asks for it, stores it as its own split, and the
gate's and the report's numbers stay those of validation and test."""

from __future__ import annotations

import json

from backend.harness.loader import default_harness_path
from dead_group_runs import engine


def _splits(eng) -> dict[str, dict]:
    rows = eng.store.rows("SELECT split, n, accuracy, results_json FROM evals ORDER BY id")
    return {r["split"]: {"n": r["n"], "results": json.loads(r["results_json"])} for r in rows}


def test_code_run_stores_humaneval_as_its_own_split(tmp_path, tiny_model):
    code = str(default_harness_path("code"))
    eng = engine(tmp_path / "ood", tiny_model, code, ["domain=code", "eval.n_val=2", "eval.n_test=3", "eval.n_ood=2"])
    try:
        eng.evaluate(0)
        splits = _splits(eng)
    finally:
        eng.store.close()
    assert set(splits) == {"validation", "test", "ood"}
    assert [splits[s]["n"] for s in ("validation", "test", "ood")] == [2, 3, 2]
    assert all(r["task_id"].startswith("HumanEval/") for r in splits["ood"]["results"])
    assert not any(r["task_id"].startswith("HumanEval/") for s in ("validation", "test") for r in splits[s]["results"])
    assert {r["level"] for r in splits["test"]["results"]} == {0}  # each result names its level


def test_no_ood_split_unless_asked(tmp_path, tiny_model):
    eng = engine(tmp_path / "plain", tiny_model, str(default_harness_path("code")), ["domain=code"])
    try:
        eng.evaluate(0)
        assert set(_splits(eng)) == {"validation", "test"}
    finally:
        eng.store.close()

