"""The run database schema: append-only numbered migrations (sqlite-utils).

Every open applies pending migrations. A database that carries a migration
this code does not know comes from a newer evotui and is refused.
Columns follow the llm logs.db habits: plural tables, `*_json` for structured
values, `*_ms` for timings.
"""

from __future__ import annotations

import json

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from backend.store.reader import FTS_TABLE, FTS_TOKENIZE

MIGRATIONS = Migrations("evotui")

TABLES = (
    "runs", "steps", "rollouts", "turns", "diagnoses", "harness_versions", "policy_versions",
    "evals", "rounds", "interventions", "backtests", "skills", "commands", "events",
)


@MIGRATIONS(name="m001_initial")
def m001_initial(db: Database) -> None:
    db.table("runs").create(
        {
            "id": int, "name": str, "created_at": str, "updated_at": str, "status": str,
            "domain": str, "seed": int, "step": int, "steps_total": int, "heldout_acc": float,
            "harness_version": int, "policy_version": int, "auto_promote": int, "paused": int,
            "pid": int, "error": str, "config_json": str,
        },
        pk="id",
    )
    db.table("steps").create(
        {
            "step": int, "created_at": str, "harness_version": int, "policy_version": int,
            "n_rollouts": int, "n_groups": int, "reward_mean": float, "reward_std": float,
            "verdict_acc": float, "agreement": float, "dead_group_frac": float,
            "frac_reward_zero_std": float, "kept_groups": int, "mean_completion_tokens": float,
            "truncated_frac": float, "entropy": float, "loss": float, "kl": float,
            "clip_frac": float, "grad_norm": float, "tokens": int, "tokens_per_s": float,
            "gen_ms": float, "score_ms": float, "diagnose_ms": float, "train_ms": float,
            "store_ms": float, "total_ms": float, "metrics_json": str,
        },
        pk="step",
    )
    db.table("rollouts").create(
        {
            "id": int, "step": int, "domain": str, "task_id": str, "group_idx": int, "idx": int,
            "prompt": str, "completion": str, "prompt_tokens": int, "completion_tokens": int,
            "reward": float, "rewards_json": str, "verdict": str, "correct": int,
            "verdict_score": float, "verdict_json": str, "finish": str, "status": str,
            "error": str, "harness_version": int, "policy_version": int, "gen_ms": float,
            "eval_ms": float, "task_json": str, "obs_json": str, "token_ids_json": str,
            "labels": str,
        },
        pk="id",
    )
    db.table("rollouts").create_index(["step"])
    db.table("rollouts").create_index(["verdict"])
    db.table("rollouts").create_index(["harness_version"])
    db.table("turns").create(
        {
            "id": int, "rollout_id": int, "turn": int, "role": str, "tool": str,
            "args_json": str, "content": str, "tokens": int, "ms": float,
        },
        pk="id",
        foreign_keys=[("rollout_id", "rollouts", "id")],
    )
    db.table("turns").create_index(["rollout_id"])
    db.table("diagnoses").create(
        {
            "id": int, "rollout_id": int, "step": int, "label": str, "evidence": str,
            "validity": int, "harness_version": int,
        },
        pk="id",
        foreign_keys=[("rollout_id", "rollouts", "id")],
    )
    db.table("diagnoses").create_index(["rollout_id"])
    db.table("diagnoses").create_index(["label", "step"])
    db.table("harness_versions").create(
        {
            "id": int, "parent": int, "created_at": str, "code": str, "sha": str, "diff": str,
            "status": str, "intervention_id": int, "note": str,
        },
        pk="id",
    )
    db.table("policy_versions").create(
        {
            "id": int, "parent": int, "step": int, "checkpoint": str, "heldout_acc": float,
            "harness_version": int, "created_at": str,
        },
        pk="id",
    )
    db.table("evals").create(
        {
            "id": int, "step": int, "created_at": str, "policy_version": int,
            "harness_version": int, "n": int, "accuracy": float, "agreement": float,
            "results_json": str, "ms": float,
        },
        pk="id",
    )
    db.table("rounds").create(
        {
            "id": int, "step": int, "created_at": str, "harness_version": int,
            "failure_table_json": str, "metrics_json": str, "summary": str,
        },
        pk="id",
    )
    db.table("interventions").create(
        {
            "id": int, "round_id": int, "created_at": str, "updated_at": str, "kind": str,
            "target": str, "title": str, "hypothesis": str, "expected": str, "diff": str,
            "code": str, "parent_version": int, "child_version": int, "proposer": str,
            "skills_json": str, "status": str, "reason": str, "history_json": str,
            "params_json": str, "score": float, "promoted_step": int,
        },
        pk="id",
    )
    db.table("backtests").create(
        {
            "id": int, "intervention_id": int, "created_at": str, "mode": str,
            "n_rollouts": int, "metrics_json": str, "verdict": str, "reason": str, "ms": float,
        },
        pk="id",
        foreign_keys=[("intervention_id", "interventions", "id")],
    )
    db.table("skills").create(
        {
            "id": int, "name": str, "domain": str, "created_at": str, "updated_at": str,
            "trigger_json": str, "change_json": str, "evidence_json": str, "uses": int,
            "helped": int, "source": str,
        },
        pk="id",
    )
    db.table("skills").create_index(["name"], unique=True)
    db.table("commands").create(
        {
            "id": int, "created_at": str, "verb": str, "arg_json": str, "source": str,
            "status": str, "result": str, "acked_at": str,
        },
        pk="id",
    )
    db.table("events").create(
        {"id": int, "ts": str, "step": int, "level": str, "kind": str, "message": str, "data_json": str},
        pk="id",
    )


@MIGRATIONS(name="m002_tui_indexes")
def m002_tui_indexes(db: Database) -> None:
    """Indexes the TUI's keyset paging needs: label filter newest-first, failure mix by step."""
    db.table("diagnoses").create_index(["label", "rollout_id"], if_not_exists=True)
    db.table("diagnoses").create_index(["step", "label"], if_not_exists=True)
    db.table("rollouts").create_index(["domain"], if_not_exists=True)


@MIGRATIONS(name="m003_gate")
def m003_gate(db: Database) -> None:
    """The statistical gate.

    - backtests: the decision's statistics as columns (decisions and views read
      them): the targeted `metric`, its `effect` (candidate minus incumbent),
      the 95% interval `ci_low`..`ci_high`, `p_value`, paired sample size `n`,
      and `underpowered` (1 when the sample could not detect `evolve.min_effect`).
    - evals: `split` is 'validation' (the gate may read it) or 'test' (reported
      only); later 'ood' too (`eval.n_ood`, reported only: no migration needed).
      Rows written before this migration were the one held-out set the gate read,
      so they become validation.
    - runs: `val_acc` and `test_acc`, the latest of each; `heldout_acc` now
      mirrors `test_acc` (the reported number) for older readers.
    - rounds: `skipped_json`, the candidates the churn rules dropped and why.
    """
    for col, typ in (("metric", str), ("effect", float), ("ci_low", float), ("ci_high", float),
                     ("p_value", float), ("n", int), ("underpowered", int)):
        db.table("backtests").add_column(col, typ)
    db.table("evals").add_column("split", str)
    db.execute("UPDATE evals SET split = 'validation' WHERE split IS NULL")
    db.table("evals").create_index(["split", "step"], if_not_exists=True)
    db.table("runs").add_column("val_acc", float)
    db.table("runs").add_column("test_acc", float)
    db.table("rounds").add_column("skipped_json", str)


@MIGRATIONS(name="m004_rollout_advantages")
def m004_rollout_advantages(db: Database) -> None:
    """rollouts: what training did with each rollout, so a replay can be checked against it:
    `advantage` (0 for rollouts not trained on) and `kept` (1 when the filters kept it).
    Rows written before this migration have NULL in both."""
    db.table("rollouts").add_column("advantage", float)
    db.table("rollouts").add_column("kept", int)


@MIGRATIONS(name="m005_run_activity")
def m005_run_activity(db: Database) -> None:
    """runs: `activity`, what the engine is doing now ("held-out eval 12/32", "round at step 5:
    backtesting 2/4", "stopping…"), written at its checkpoints and shown in the TUI's header.
    NULL when it reports nothing (an older engine, or between checkpoints)."""
    db.table("runs").add_column("activity", str)


@MIGRATIONS(name="m006_intervention_watch")
def m006_intervention_watch(db: Database) -> None:
    """interventions: the post-promotion watch as columns (the gate decides on it; it lived in
    `params_json.watch`): `replaced_version` (what a rollback returns to), `baseline_eval_id` and
    `baseline_acc` (the validation evaluation a promotion is judged against), and once judged
    `judged_step`, `judged_eval_id`, `judged_acc`, `judged_delta` and `gain_json` (the paired
    evidence). Open runs keep their state: each row is backfilled from its JSON, whose `watch`
    key is then dropped so the columns are the one record."""
    for col, typ in (("replaced_version", int), ("baseline_eval_id", int), ("baseline_acc", float),
                     ("judged_step", int), ("judged_eval_id", int), ("judged_acc", float),
                     ("judged_delta", float), ("gain_json", str)):
        db.table("interventions").add_column(col, typ)
    rows = db.execute("SELECT id, params_json, promoted_step FROM interventions "
                      "WHERE params_json LIKE '%\"watch\"%'").fetchall()
    for iid, text, promoted_step in rows:
        try:
            params = json.loads(text)
        except ValueError:
            continue
        watch = params.pop("watch", None) if isinstance(params, dict) else None
        if not isinstance(watch, dict):
            continue
        judged = (watch.get("eval_step") or promoted_step or 0) if watch.get("judged") else None
        gain = watch.get("gain")
        db.execute(
            "UPDATE interventions SET replaced_version = ?, baseline_eval_id = ?, baseline_acc = ?, "
            "judged_step = ?, judged_eval_id = ?, judged_acc = ?, judged_delta = ?, gain_json = ?, "
            "params_json = ? WHERE id = ?",
            (watch.get("replaced"), watch.get("baseline_eval"), watch.get("baseline_acc"), judged,
             watch.get("eval_id"), watch.get("accuracy"), watch.get("delta"),
             json.dumps(gain) if gain is not None else None, json.dumps(params, separators=(",", ":")), iid))


@MIGRATIONS(name="m007_rollouts_fts")
def m007_rollouts_fts(db: Database) -> None:
    """rollouts_fts: the word search of the TUI's rollouts screen, so it reads a page of matches
    instead of scanning every rollout's text. Triggers keep it in step with `rollouts` inside each
    step's commit; a run written before this migration is indexed here when it is next opened."""
    cols = "prompt, completion, task_id"
    db.executescript(f"""
        CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(
            {cols}, content='rollouts', content_rowid='id', tokenize="{FTS_TOKENIZE}");
        CREATE TRIGGER IF NOT EXISTS rollouts_fts_insert AFTER INSERT ON rollouts BEGIN
            INSERT INTO {FTS_TABLE} (rowid, {cols}) VALUES (new.id, new.prompt, new.completion, new.task_id);
        END;
        CREATE TRIGGER IF NOT EXISTS rollouts_fts_delete AFTER DELETE ON rollouts BEGIN
            INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, {cols})
                VALUES ('delete', old.id, old.prompt, old.completion, old.task_id);
        END;
        CREATE TRIGGER IF NOT EXISTS rollouts_fts_update AFTER UPDATE OF {cols} ON rollouts BEGIN
            INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, {cols})
                VALUES ('delete', old.id, old.prompt, old.completion, old.task_id);
            INSERT INTO {FTS_TABLE} (rowid, {cols}) VALUES (new.id, new.prompt, new.completion, new.task_id);
        END;
        INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('rebuild');
    """)


@MIGRATIONS(name="m008_run_device")
def m008_run_device(db: Database) -> None:
    """runs: `device`, where the run trains, in words: "cuda:0", "cpu", "2 x cuda" (a data-parallel
    run's ranks, backend/ddp), with " on NODE" when a Ray cluster placed it. Written each time the
    run starts or resumes (a resume may land elsewhere); NULL for runs started before it."""
    db.table("runs").add_column("device", str)


@MIGRATIONS(name="m009_round_spent")
def m009_round_spent(db: Database) -> None:
    """rounds: `spent_json`, set when the offline proposer found no untried move the run's gate
    can judge: the JSON list of knobs it left for want of a trial (`[]`: the whole space is
    spent). NULL for a round that proposed something, and for rounds before this migration."""
    db.table("rounds").add_column("spent_json", str)


@MIGRATIONS(name="m010_backtest_same_update")
def m010_backtest_same_update(db: Database) -> None:
    """backtests: `same_update`, 1 when a replayed candidate gives training the same update as the
    incumbent on every replayed rollout (the same rollouts trained, with the same advantages;
    `replay.same_update`), 0 when it does not. The proposer reads it to move such a knob farther
    (`space.Steps`). NULL for probes, trials, replays that failed before judging, and backtests
    before this migration."""
    db.table("backtests").add_column("same_update", int)


def known_migrations() -> list[str]:
    return [m.name for m in MIGRATIONS._migrations]
