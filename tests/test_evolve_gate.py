"""Operator commands, promotion, rollback after a held-out drop, and skills from gains."""

import pytest

from backend.dispatch import Control, apply_one
from backend.evolve import after_eval, promote, run_round
from backend.store import loads
from synthetic_run import add_eval, build_run, context, make_probe, outcomes


@pytest.fixture
def run(tmp_path):
    """A supervised run after one round: candidates wait for the operator."""
    s = build_run(tmp_path / "run.db", steps=6)
    add_eval(s, 5, outcomes(40, 12))  # validation 0.30
    ctx = context(s, probe=make_probe())
    out = run_round(ctx).summary
    yield s, ctx, out
    s.close()


def apply_command(ctx, cmd):
    """The engine's one dispatcher, applying (and acknowledging) one command."""
    return apply_one(Control(ctx.store), cmd, ctx)


def _cmd(store, verb, **arg):
    cid = store.send_command(verb, arg, source="test")
    return store.get("commands", cid)


def _unchanged(effects):
    """The post-eval check rolled nothing back: no harness or policy for the loop to restore."""
    return effects.harness_version is None and effects.restore_policy_step is None


def _lenient(store):
    return next(r for r in store.rows("SELECT * FROM interventions") if "Lenient" in r["title"])


def test_approve_promotes_and_acknowledges(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    status, result = apply_command(ctx, _cmd(store, "approve", id=iid))
    assert status == "applied" and "harness v2" in result
    cmd = store.rows("SELECT * FROM commands ORDER BY id DESC LIMIT 1")[0]
    assert cmd["status"] == "applied" and cmd["acked_at"]
    row = store.get("interventions", iid)
    assert row["status"] == "promoted" and row["child_version"] == 2
    assert [h["to"] for h in loads(row["history_json"])][-2:] == ["approved", "promoted"]
    assert store.run()["harness_version"] == 2 and ctx.harness_version == 2
    # approving it again is refused, with the reason
    status, result = apply_command(ctx, _cmd(store, "approve", id=iid))
    assert status == "rejected" and "promoted" in result


def test_veto_records_the_reason(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    assert apply_command(ctx, _cmd(store, "veto", id=iid, reason="I prefer tags"))[0] == "applied"
    row = store.get("interventions", iid)
    assert row["status"] == "vetoed" and row["reason"] == "I prefer tags"
    assert loads(row["history_json"])[-1]["reason"] == "I prefer tags"
    assert apply_command(ctx, _cmd(store, "approve", id=iid))[0] == "rejected"


def test_bad_and_foreign_commands(run):
    store, ctx, out = run
    assert apply_command(ctx, _cmd(store, "approve", id=999)) == ("rejected", "no intervention #999")
    assert apply_command(ctx, _cmd(store, "approve"))[0] == "rejected"
    assert apply_command(ctx, _cmd(store, "launch"))[0] == "rejected"
    pause = _cmd(store, "pause")
    assert apply_command(ctx, pause) == ("applied", "paused")
    assert store.get("commands", pause["id"])["status"] == "applied" and store.run()["paused"] == 1


def test_auto_promote_on_promotes_the_best_waiting_candidate(run):
    store, ctx, out = run
    status, result = apply_command(ctx, _cmd(store, "auto_promote", on=True))
    assert status == "applied" and "promoted harness v2" in result
    assert store.run()["auto_promote"] == 1
    assert store.get("harness_versions", 2)["intervention_id"] == _lenient(store)["id"]
    assert apply_command(ctx, _cmd(store, "auto_promote", value="off"))[0] == "rejected"  # intent is explicit
    assert apply_command(ctx, _cmd(store, "auto_promote", on=False))[0] == "applied"
    assert store.run()["auto_promote"] == 0


def test_held_out_drop_rolls_back_to_the_replaced_version(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    assert promote(ctx, iid, "test") == 2
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 2))
    effects = after_eval(ctx, 0.05)  # 0.30 -> 0.05 is beyond rollback_drop 0.1
    assert (effects.harness_version, effects.restore_policy_step, effects.skills) == (1, 6, [])
    assert effects.harness.code == store.get("harness_versions", 1)["code"]
    assert any(level == "warning" and "rolled back intervention" in m for level, m in effects.log)
    assert store.run()["harness_version"] == 1 and ctx.harness_version == 1
    assert [v["status"] for v in store.rows("SELECT status FROM harness_versions ORDER BY id")] == \
        ["active", "rolled_back"]
    row = store.get("interventions", iid)
    assert row["status"] == "rolled_back" and "0.300 -> 0.050" in row["reason"]
    assert _unchanged(after_eval(ctx, 0.05))  # judged once
    assert store.count("skills") == 0


def test_eval_at_the_promotion_step_only_refreshes_the_baseline(run):
    store, ctx, out = run
    promote(ctx, _lenient(store)["id"], "test")
    add_eval(store, 6, outcomes(40, 20))
    assert _unchanged(after_eval(ctx, 0.5))  # same step: no training under v2 yet
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 18))
    assert _unchanged(after_eval(ctx, 0.45))  # 0.5 -> 0.45 is within rollback_drop, and not significant
    assert store.get("interventions", _lenient(store)["id"])["status"] == "promoted"
    assert store.count("skills") == 0


def test_a_promotion_that_helps_becomes_a_skill(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    promote(ctx, iid, "test")
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 20))  # 12 -> 20 of the same 40 problems: 8 discordant, all gains
    effects = after_eval(ctx, 0.5)
    assert _unchanged(effects) and effects.skills == ["lenient_extraction"]
    (card,) = store.rows("SELECT * FROM skills")
    assert card["name"] == "lenient_extraction" and card["helped"] == 1 and card["domain"] == "math"
    trigger, change, evidence = (loads(card[k]) for k in ("trigger_json", "change_json", "evidence_json"))
    assert trigger["labels"] == ["no_answer_tag"] and "no_answer_tag" in trigger["signature"]
    assert change["op"] == "replace" and change["name"] == "extract_answer"
    assert change["source"].startswith("def extract_answer(r):")
    assert evidence["deltas"] == [pytest.approx(0.2)] and evidence["interventions"] == [iid]
    (gain,) = evidence["gains"]  # the card keeps the interval and the sample sizes
    assert gain["n"] == 40 and gain["discordant"] == 8 and 0 < gain["ci_low"] < 0.2 < gain["ci_high"]
    assert gain["p_value"] < 0.01 and gain["test"] == "mcnemar-exact"
    assert evidence["backtests"][0]["agreement_new"] > evidence["backtests"][0]["agreement_old"]


def test_a_validation_rise_without_the_changes_own_paired_gain_teaches_nothing(run):
    """Before/after validation is read steps apart: it also measures what the policy learned
    meanwhile. A change whose own backtest showed no gain (a retired diagnostic, say) is no skill."""
    store, ctx, out = run
    iid = _lenient(store)["id"]
    bt = store.rows("SELECT id FROM backtests WHERE intervention_id = ? ORDER BY id DESC", (iid,))[0]
    store.update("backtests", bt["id"], {"ci_low": 0.0})  # its backtest: no gain beyond noise
    promote(ctx, iid, "test")
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 20))  # the same validation rise that teaches a skill above
    assert _unchanged(after_eval(ctx, 0.5))
    assert store.count("skills") == 0


def test_a_gain_within_the_noise_teaches_nothing(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    promote(ctx, iid, "test")
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 13))  # one more problem of 40: the interval straddles zero
    assert _unchanged(after_eval(ctx, 0.325))
    assert store.count("skills") == 0
    gain = store.intervention(iid).gain
    assert gain["n"] == 40 and gain["ci_low"] < 0 < gain["ci_high"]


def test_only_the_validation_split_is_read(run):
    store, ctx, out = run
    iid = _lenient(store)["id"]
    promote(ctx, iid, "test")
    ctx.step = 10
    add_eval(store, 10, outcomes(40, 40), split="test")  # a perfect test score must not teach a skill
    add_eval(store, 10, outcomes(40, 12))
    assert _unchanged(after_eval(ctx)) and store.count("skills") == 0
    assert store.intervention(iid).judged_acc == pytest.approx(0.3)


def _auto_round(tmp_path, promotions: int):
    from backend.config import RunConfig

    s = build_run(tmp_path / f"auto{promotions}" / "run.db", steps=6)
    s.set_run(auto_promote=1)
    cfg = RunConfig()
    cfg.evolve.promotions_per_round = promotions
    return s, run_round(context(s, cfg=cfg, probe=make_probe())).summary


def test_a_round_promotes_its_passed_changes_in_turn_each_judged_on_the_version_it_changes(tmp_path):
    """Two independent fixes pass in one round (retiring a diagnostic that never fires, lenient
    extraction): both are promoted in this round, the second only after being re-applied onto
    the version the first made and passing a fresh backtest against that version."""
    store, out = _auto_round(tmp_path, promotions=2)
    first, second = out["promoted"], out["also_promoted"][0]
    versions = store.rows("SELECT id, intervention_id FROM harness_versions ORDER BY id")
    assert [v["intervention_id"] for v in versions[1:]] == [first, second]
    later = store.get("interventions", second)
    rebased = loads(later["params_json"])["rebased"]
    assert rebased == [{"from": 1, "onto": versions[1]["id"], "why": "auto mode"}]
    assert len(store.rows("SELECT id FROM backtests WHERE intervention_id = ?", [second])) == 2  # v1, then v2
    active = store.get("harness_versions", versions[2]["id"])["code"]
    assert "def diagnose_empty" not in active and "answer_value(r.completion)" in active  # both are in
    assert f"promoted #{first}, then #{second}, now v{versions[2]['id']}" in \
        store.get("rounds", out["round_id"])["summary"]
    # the report lists each promotion once, with the backtest that decided it (against v2)
    listed = store.promotions_with_backtests()
    assert [r["id"] for r in listed] == sorted([first, second])
    last = store.rows("SELECT verdict FROM backtests WHERE intervention_id = ? ORDER BY id DESC", [second])[0]
    assert next(r for r in listed if r["id"] == second)["bt_verdict"] == last["verdict"]
    store.close()


def test_one_promotion_a_round_when_asked(tmp_path):
    store, out = _auto_round(tmp_path, promotions=1)
    assert out["promoted"] and out["also_promoted"] == []
    assert store.count("harness_versions") == 2
    store.close()
