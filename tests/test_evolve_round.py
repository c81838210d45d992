"""A full evolution round on a synthetic default run (SmolLM2-135M style rollouts:
"The answer is 12" without tags, so most groups are dead under the default reward)."""

import json

import pytest

from backend.config import RunConfig
from backend.evolve import failure_table, lineage, run_round
from backend.evolve import offline
from synthetic_run import add_steps, build_run, context, make_probe
from backend.store import loads


@pytest.fixture
def store(tmp_path):
    s = build_run(tmp_path / "run.db", steps=6)
    yield s
    s.close()


def _engine_stand_in(store, run_dir):
    """The engine's side of the protocol only (`Engine.apply`): no model, harness v1 active."""
    from backend.harness.loader import Harness
    from backend.loop import Engine

    run_dir.mkdir()
    engine = Engine.__new__(Engine)
    engine.store, engine.run_dir, engine.quiet, engine.harness_version = store, run_dir, True, 1
    engine.harness = Harness.from_code(store.get("harness_versions", 1)["code"])
    return engine


def _by_title(store, word):
    return [r for r in store.rows("SELECT * FROM interventions") if word in r["title"]]


def test_failure_table_names_the_default_failure(store):
    table = failure_table(store, range(1, 7))
    top = {e["label"]: e for e in table}
    assert table[0]["label"] == "no_answer_tag" and top["no_answer_tag"]["share"] > 0.9
    # correct answers carry the label too: the reward cannot see them
    assert 0.1 < top["no_answer_tag"]["correct_share"] < 0.6
    assert top["dead_groups"]["share"] > 0.5
    assert all(store.get("rollouts", i) for i in top["no_answer_tag"]["examples"])
    assert set(top["no_answer_tag"]) >= {"label", "count", "share", "trend", "examples"}


def test_supervised_round_finds_the_lenient_fix_and_waits(store):
    ctx = context(store, probe=make_probe())
    out = run_round(ctx).summary
    assert out["error"] is None and out["promoted"] is None
    assert store.run()["harness_version"] == 1
    (lenient,) = _by_title(store, "Lenient")
    assert lenient["status"] == "passed", lenient["reason"]
    assert lenient["id"] in out["passed"]
    m = json.loads(store.rows("SELECT metrics_json FROM backtests WHERE intervention_id = ?", (lenient["id"],))[0]
                   ["metrics_json"])
    assert m["revived"] > 5 and m["agreement_new"] > m["agreement_old"] + 0.2
    assert m["dead_frac_new"] < m["dead_frac_old"]
    # every candidate carries its single-factor diff, hypothesis and history
    assert lenient["diff"].count("\n-") >= 1 and "extract_answer" in lenient["diff"]
    assert [h["to"] for h in loads(lenient["history_json"])] == ["proposed", "backtesting", "passed"]
    rnd = store.get("rounds", out["round_id"])
    assert loads(rnd["failure_table_json"])[0]["label"] == "no_answer_tag" and "passed" in rnd["summary"]


def test_auto_round_promotes_the_best_candidate_and_lineage_explains_it(store, tmp_path):
    store.set_run(auto_promote=1)
    cfg = RunConfig()
    cfg.evolve.promotions_per_round = 1  # the best one alone (in turn: test_evolve_gate.py)
    ctx = context(store, cfg=cfg, probe=make_probe())
    effects = run_round(ctx)
    out = effects.summary
    assert out["harness_version"] == 2 == store.run()["harness_version"] == ctx.harness_version
    # the round hands the loop its effects: the engine adopts the promoted harness from them
    assert effects.harness_version == 2 and effects.restore_policy_step is None
    assert effects.harness.code == store.get("harness_versions", 2)["code"]
    assert ("info", f"round at step 6: {store.get('rounds', out['round_id'])['summary']}") in effects.log
    engine = _engine_stand_in(store, tmp_path / "engine")
    engine.apply(effects, 6)
    assert engine.harness_version == 2 and engine.harness.sha == effects.harness.sha
    assert (tmp_path / "engine" / "harness.py").read_text() == effects.harness.code
    assert store.rows("SELECT * FROM events WHERE message = 'harness version 2 is now active'")
    promoted = store.get("interventions", out["promoted"])
    assert "Lenient" in promoted["title"] and promoted["promoted_step"] == 6
    assert [v["status"] for v in store.rows("SELECT status FROM harness_versions ORDER BY id")] == \
        ["superseded", "active"]
    steps = lineage(store, 2)
    assert [s["version"] for s in steps] == [2, 1]
    assert steps[0]["intervention"]["hypothesis"] and steps[0]["backtest"]["verdict"] == "passed"
    assert steps[0]["diagnosis"]["failure_table"][0]["label"] == "no_answer_tag"
    assert steps[0]["decision"]["promoted"].startswith("auto-promoted")
    assert steps[1]["intervention"] is None  # the root


def test_next_round_builds_on_the_promotion_without_repeating_it(store):
    store.set_run(auto_promote=1)
    run_round(context(store, probe=make_probe()))
    add_steps(store, 7, 11)
    before = {r["code"] for r in store.rows("SELECT code FROM interventions")}
    out = run_round(context(store, step=11, probe=make_probe())).summary
    assert out["error"] is None
    new = [store.get("interventions", i) for i in out["proposed"]]
    assert new and all(r["code"] not in before for r in new if r["code"])
    # replay includes the rollouts the promoted fix repaired, and checks them
    replayed = [json.loads(b["metrics_json"]) for b in store.rows("SELECT * FROM backtests WHERE mode = 'replay' "
                                                                   "AND intervention_id >= ?", (min(out["proposed"]),))]
    assert replayed and all(m.get("fixed_checked", 0) > 0 for m in replayed if "fixed_checked" in m)


def test_round_never_raises(store, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("proposer exploded")
    monkeypatch.setattr(offline, "propose", boom)
    out = run_round(context(store)).summary
    assert out["error"] == "RuntimeError: proposer exploded"
    assert store.get("rounds", out["round_id"])["summary"].startswith("error:")
    assert store.rows("SELECT * FROM events WHERE level = 'error'")


def test_probe_failures_fail_only_their_candidate(store):
    def broken_probe(h, n):
        raise RuntimeError("GPU on fire")
    out = run_round(context(store, probe=broken_probe)).summary
    assert out["error"] is None
    probed = [r for r in store.rows("SELECT * FROM interventions") if r["kind"] in ("prompt", "sampling", "curriculum")]
    assert probed and all(r["status"] == "failed" and "GPU on fire" in r["reason"] for r in probed)
    assert _by_title(store, "Lenient")[0]["status"] == "passed"


def test_the_report_counts_search_memory_holds_apart_from_churn():
    """A round's line says how many candidates churn refused and how many the search memory held."""
    from backend.evolve.records import HELD_PREFIX, RoundReport, Schedule, Skip

    churn = Skip("flip a filter", "space:FILTERS.drop_invalid", "offline", "tried 3 times in the last 5 rounds")
    held = Skip("hint 0.5", "space:SAMPLING.hint", "offline", f"{HELD_PREFIX}'hint 0.5' returned inconclusive (#4)")
    line = RoundReport(7, 1, plan=Schedule(proposed=(1,), skipped=(churn, held, held))).text()
    assert ", 1 skipped (churn), 2 held by the search memory" in line
    assert "skipped" not in RoundReport(7, 1, plan=Schedule(skipped=(held,))).text()
