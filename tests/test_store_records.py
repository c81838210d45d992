"""The store's evolution records: typed Intervention/Backtest rows, the watch columns, and the
migration that moved an open run's watch out of `params_json` (m006)."""

from __future__ import annotations

import json
import sqlite3

from backend.store import Store
from backend.types import Backtest, Intervention


def _store(tmp_path) -> Store:
    s = Store.open(tmp_path / "run.db")
    s.create_run("t", {"domain": "math"}, seed=0, steps=4)
    return s


def _add(s: Store, params: dict, **kw) -> int:
    values = dict(round_id=None, kind="reward", target="no_answer_tag", title="t", hypothesis="h", expected="e",
                  diff="", code="X = 1\n", parent_version=None, proposer="offline", skills=["lenient"],
                  params=params, history=[{"to": "proposed"}])
    return s.add_intervention(**dict(values, **kw))


def test_records_are_typed_and_the_watch_has_columns(tmp_path):
    s = _store(tmp_path)
    v1 = s.add_harness_version("X = 0\n", None, "", "active", "sha0")
    iid = _add(s, {"names": ["X"], "template": "lenient"}, parent_version=v1)
    rec = s.intervention(iid)
    assert isinstance(rec, Intervention) and rec.names == ["X"] and rec.skills == ["lenient"]
    assert rec.status == "proposed" and not rec.judged and s.waiting_interventions() == []

    s.set_intervention_status(iid, "passed", "ok", rec.history + [{"to": "passed"}])
    bid = s.add_backtest(iid, mode="replay", n_rollouts=8, metrics={"fixed_ids": [3]}, verdict="passed",
                         reason="ok", ms=1.0, stats={"metric": "recall", "effect": 0.2, "underpowered": 0},
                         score=0.2)
    bt = s.latest_backtest(iid)
    assert isinstance(bt, Backtest) and bt.id == bid and bt.metrics == {"fixed_ids": [3]} and bt.effect == 0.2
    assert [r.id for r in s.waiting_interventions()] == [iid] and s.intervention(iid).score == 0.2

    vid = s.promote_version(s.intervention(iid), "sha1", step=3, replaced=v1, baseline_eval_id=None,
                            baseline_acc=0.4)
    s.set_intervention_status(iid, "promoted", "auto", [])
    assert s.run()["harness_version"] == vid and s.harness_version(v1)["status"] == "superseded"
    assert [b.intervention_id for b in s.promoted_passed_backtests()] == [iid]
    assert [r.id for r in s.unjudged_promotions(2)] == [] and [r.id for r in s.unjudged_promotions(3)] == [iid]
    s.set_judged(iid, 5, None, 0.5, 0.1, {"n": 40})
    rec = s.intervention(iid)
    assert rec.judged and rec.replaced_version == v1 and rec.baseline_acc == 0.4 and rec.gain == {"n": 40}
    assert s.unjudged_promotions(9) == []

    s.roll_back_version(vid, v1)
    assert s.harness_version(vid)["status"] == "rolled_back" and s.run()["harness_version"] == v1


def test_m006_moves_an_open_runs_watch_into_columns(tmp_path):
    s = _store(tmp_path)
    watch = {"baseline_acc": 0.3, "baseline_eval": 7, "replaced": 1, "judged": True, "accuracy": 0.35,
             "delta": 0.05, "eval_step": 12, "eval_id": 9, "gain": {"n": 40, "ci_low": -0.1}}
    judged = _add(s, {"names": ["X"], "watch": watch})
    waiting = _add(s, {"names": ["Y"], "watch": {"baseline_acc": None, "baseline_eval": None, "replaced": 2,
                                                 "judged": False}})
    plain = _add(s, {"names": ["Z"]})
    s.close()
    # back to the schema before m006: its columns gone, the watch only in the JSON
    conn = sqlite3.connect(tmp_path / "run.db")
    for col in ("replaced_version", "baseline_eval_id", "baseline_acc", "judged_step", "judged_eval_id",
                "judged_acc", "judged_delta", "gain_json"):
        conn.execute(f"ALTER TABLE interventions DROP COLUMN {col}")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm006_intervention_watch'")
    conn.commit()
    conn.close()

    s = Store.open(tmp_path / "run.db")
    a, b, c = s.intervention(judged), s.intervention(waiting), s.intervention(plain)
    assert (a.judged_step, a.judged_eval_id, a.judged_acc, a.judged_delta) == (12, 9, 0.35, 0.05)
    assert (a.baseline_eval_id, a.baseline_acc, a.replaced_version) == (7, 0.3, 1) and a.gain["n"] == 40
    assert not b.judged and b.replaced_version == 2
    assert a.params == {"names": ["X"]} and b.params == {"names": ["Y"]} and c.params == {"names": ["Z"]}
    raw = s.get("interventions", judged)
    assert "watch" not in json.loads(raw["params_json"])
