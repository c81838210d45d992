"""The evolution's records: interventions, backtests, rounds, harness versions, skills.

Mixed into `Store`; evolution asks by name (`store.unjudged_promotions(step)`)
and gets typed records (`backend.types.Intervention`, `Backtest`) or plain
rows, never SQL. Writes that must land together (a promotion: the new
version, the intervention, the run's active version) are one transaction.
"""

from __future__ import annotations

from typing import Any

from backend.types import Backtest, Intervention

from .base import Queries, Row, dumps, loads, now

def intervention_from_row(row: Row) -> Intervention:
    """A row of `interventions` (any schema since m001) as a typed record."""
    return Intervention(
        id=row["id"], round_id=row["round_id"], created_at=row["created_at"], updated_at=row["updated_at"],
        kind=row["kind"] or "", target=row["target"] or "", title=row["title"] or "",
        hypothesis=row["hypothesis"] or "", expected=row["expected"] or "", diff=row["diff"] or "",
        code=row["code"] or "", parent_version=row["parent_version"], child_version=row["child_version"],
        proposer=row["proposer"] or "", status=row["status"], reason=row["reason"], score=row["score"],
        promoted_step=row["promoted_step"], skills=loads(row.get("skills_json"), []) or [],
        history=loads(row.get("history_json"), []) or [], params=loads(row.get("params_json"), {}) or {},
        replaced_version=row.get("replaced_version"), baseline_eval_id=row.get("baseline_eval_id"),
        baseline_acc=row.get("baseline_acc"), judged_step=row.get("judged_step"),
        judged_eval_id=row.get("judged_eval_id"), judged_acc=row.get("judged_acc"),
        judged_delta=row.get("judged_delta"), gain=loads(row.get("gain_json")))


def backtest_from_row(row: Row) -> Backtest:
    return Backtest(
        id=row["id"], intervention_id=row["intervention_id"], created_at=row["created_at"], mode=row["mode"],
        n_rollouts=row["n_rollouts"] or 0, verdict=row["verdict"], reason=row["reason"] or "", ms=row["ms"] or 0.0,
        metrics=loads(row.get("metrics_json"), {}) or {}, metric=row.get("metric"), effect=row.get("effect"),
        ci_low=row.get("ci_low"), ci_high=row.get("ci_high"), p_value=row.get("p_value"), n=row.get("n"),
        underpowered=bool(row.get("underpowered")),
        same_update=None if row.get("same_update") is None else bool(row["same_update"]))


class EvolutionRecords(Queries):
    """Repository methods for the tables an evolution round reads and writes."""

    # ------------------------------------------------------------ interventions
    def add_intervention(self, *, round_id: int | None, kind: str, target: str, title: str, hypothesis: str,
                         expected: str, diff: str, code: str, parent_version: int | None, proposer: str,
                         skills: list[str], params: dict[str, Any], history: list[dict[str, Any]]) -> int:
        """Store a new `proposed` intervention; returns its id."""
        ts = now()
        with self.tx():
            return self.insert("interventions", {
                "round_id": round_id, "created_at": ts, "updated_at": ts, "kind": kind, "target": target,
                "title": title, "hypothesis": hypothesis, "expected": expected, "diff": diff, "code": code,
                "parent_version": parent_version, "child_version": None, "proposer": proposer,
                "skills_json": dumps(skills), "status": "proposed", "reason": None, "history_json": dumps(history),
                "params_json": dumps(params), "score": None, "promoted_step": None})

    def intervention(self, iid: int) -> Intervention | None:
        row = self.get("interventions", iid)
        return intervention_from_row(row) if row else None

    def interventions(self) -> list[Intervention]:
        """Every intervention of the run, oldest first."""
        return [intervention_from_row(r) for r in self.rows("SELECT * FROM interventions ORDER BY id")]

    def set_intervention_status(self, iid: int, status: str, reason: str, history: list[dict[str, Any]]) -> None:
        with self.tx():
            self.update("interventions", iid, {"status": status, "reason": reason, "updated_at": now(),
                                               "history_json": dumps(history)})

    def rebase_intervention(self, iid: int, code: str, parent_version: int, diff: str) -> None:
        """A candidate's change re-applied onto another harness version (same id, new code and base)."""
        with self.tx():
            self.update("interventions", iid, {"code": code, "parent_version": parent_version, "diff": diff})

    def set_intervention_params(self, iid: int, params: dict[str, Any]) -> None:
        with self.tx():
            self.update("interventions", iid, {"params_json": dumps(params)})

    def replay_sizes(self) -> dict[int, int]:
        """{intervention id: rollouts its largest replay read}, for every replayed intervention."""
        return {r["intervention_id"]: int(r["n"] or 0) for r in self.rows(
            "SELECT intervention_id, max(n_rollouts) AS n FROM backtests WHERE mode = 'replay' "
            "GROUP BY intervention_id")}

    def known_codes(self) -> set[str]:
        """Code of every candidate this run has already proposed."""
        return {r["code"] for r in self.rows("SELECT code FROM interventions WHERE code != ''")}

    def waiting_interventions(self) -> list[Intervention]:
        """Candidates waiting for a decision (passed or approved), best score first."""
        return [intervention_from_row(r) for r in self.rows(
            "SELECT * FROM interventions WHERE status IN ('passed', 'approved') "
            "ORDER BY coalesce(score, 0) DESC, id")]

    def unjudged_promotions(self, step: int) -> list[Intervention]:
        """Promotions made at or before `step` that no validation evaluation has judged yet, newest first."""
        return [intervention_from_row(r) for r in self.rows(
            "SELECT * FROM interventions WHERE status = 'promoted' AND promoted_step <= ? "
            "AND judged_step IS NULL ORDER BY id DESC", (step,))]

    def count_interventions(self, proposer: str | None = None, status: str | None = None) -> int:
        """How many interventions (of one proposer, in one status) the run holds."""
        where = [(c, v) for c, v in (("proposer", proposer), ("status", status)) if v is not None]
        sql = "SELECT count(*) FROM interventions" + (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
                                                      if where else "")
        return int(self.scalar(sql, [v for _, v in where]) or 0)

    def set_baseline(self, iid: int, eval_id: int | None, accuracy: float | None) -> None:
        """The validation evaluation a promotion will be judged against."""
        with self.tx():
            self.update("interventions", iid, {"baseline_eval_id": eval_id, "baseline_acc": accuracy})

    def set_judged(self, iid: int, step: int, eval_id: int | None, accuracy: float, delta: float | None,
                   gain: dict[str, Any] | None) -> None:
        """Record the validation evaluation that judged a promotion (it is not judged again)."""
        with self.tx():
            self.update("interventions", iid, {"judged_step": step, "judged_eval_id": eval_id, "judged_acc": accuracy,
                                               "judged_delta": delta, "gain_json": dumps(gain)})

    # ------------------------------------------------------------ backtests
    def add_backtest(self, iid: int, *, mode: str, n_rollouts: int, metrics: dict[str, Any], verdict: str,
                     reason: str, ms: float, stats: dict[str, Any], score: float) -> int:
        """Store one backtest and the candidate's score together; returns the backtest id.
        `stats`: the decision's columns (metric, effect, ci_low, ci_high, p_value, n, underpowered) and,
        for a replay, `same_update`."""
        with self.tx():
            bid = self.insert("backtests", {
                "intervention_id": iid, "created_at": now(), "mode": mode, "n_rollouts": n_rollouts,
                "metrics_json": dumps(metrics), "verdict": verdict, "reason": reason, "ms": ms, **stats})
            self.update("interventions", iid, {"score": score})
        return bid

    def latest_backtest(self, iid: int) -> Backtest | None:
        rows = self.rows("SELECT * FROM backtests WHERE intervention_id = ? ORDER BY id DESC LIMIT 1", (iid,))
        return backtest_from_row(rows[0]) if rows else None

    def promoted_passed_backtests(self) -> list[Backtest]:
        """The passing backtests of interventions that are promoted now (not rolled back)."""
        return [backtest_from_row(r) for r in self.rows(
            "SELECT b.* FROM backtests b JOIN interventions i ON i.id = b.intervention_id "
            "WHERE i.status = 'promoted' AND b.verdict = 'passed' ORDER BY b.id")]

    # ------------------------------------------------------------ harness versions
    def harness_version(self, vid: int) -> Row | None:
        return self.get("harness_versions", vid)

    def harness_versions(self) -> list[Row]:
        """Every harness version (id, code, intervention_id), oldest first."""
        return self.rows("SELECT id, code, intervention_id FROM harness_versions ORDER BY id")

    def add_harness_version(self, code: str, parent: int | None, diff: str, status: str, sha: str,
                            intervention_id: int | None = None, note: str = "") -> int:
        with self.tx():
            return self.insert("harness_versions", {
                "parent": parent, "created_at": now(), "code": code, "sha": sha, "diff": diff,
                "status": status, "intervention_id": intervention_id, "note": note,
            })

    def promote_version(self, iv: Intervention, sha: str, step: int, replaced: int | None,
                        baseline_eval_id: int | None, baseline_acc: float | None) -> int:
        """Make `iv`'s code the active harness version, in one transaction: the active version is
        superseded, the new one recorded, the intervention linked to it with its watch started,
        and the run pointed at it. Returns the new version id."""
        with self.tx():
            self.conn.execute("UPDATE harness_versions SET status = 'superseded' WHERE status = 'active'")
            vid = self.insert("harness_versions", {
                "parent": iv.parent_version, "created_at": now(), "code": iv.code, "sha": sha, "diff": iv.diff,
                "status": "active", "intervention_id": iv.id, "note": iv.title})
            self.update("interventions", iv.id, {
                "child_version": vid, "promoted_step": step, "replaced_version": replaced,
                "baseline_eval_id": baseline_eval_id, "baseline_acc": baseline_acc})
            self.update("runs", 1, {"harness_version": vid, "updated_at": now()})
        return vid

    def roll_back_version(self, rolled_back: int | None, back_to: int) -> None:
        """Mark `rolled_back` so and make `back_to` the active version again, in one transaction.
        The same transaction points the run at the policy the rollback restores: the newest
        checkpoint at or before the step `rolled_back` was promoted at (none: the base model).
        The engine loads what the run points at (`Engine.restore_policy`), and so does a resume
        when a stop came before it had."""
        with self.tx():
            values: Row = {"harness_version": back_to, "updated_at": now()}
            step = None if rolled_back is None else self.scalar(
                "SELECT i.promoted_step FROM harness_versions h JOIN interventions i ON i.id = h.intervention_id "
                "WHERE h.id = ?", (rolled_back,))
            if step is not None:
                pv = self.policy_version_at(step)  # type: ignore[attr-defined]  # RolloutReads, in Store
                values["policy_version"] = pv["id"] if pv else None
            if rolled_back is not None:
                self.update("harness_versions", rolled_back, {"status": "rolled_back"})
            self.conn.execute("UPDATE harness_versions SET status = 'superseded' WHERE status = 'active'")
            self.update("harness_versions", back_to, {"status": "active"})
            self.update("runs", 1, values)

    # ------------------------------------------------------------ rounds
    def add_round(self, step: int, harness_version: int, failure_table: list[dict[str, Any]],
                  metrics: dict[str, Any]) -> int:
        with self.tx():
            return self.insert("rounds", {"step": step, "created_at": now(), "harness_version": harness_version,
                                          "failure_table_json": dumps(failure_table), "metrics_json": dumps(metrics),
                                          "summary": "running"})

    def finish_round(self, rid: int, summary: str, skipped: list[dict[str, Any]],
                     spent: list[str] | None = None) -> None:
        """The round's one-line summary, what the churn rules skipped, and (when it proposed
        nothing because no judgeable move was left) the knobs left for a trial."""
        with self.tx():
            self.update("rounds", rid, {"summary": summary, "skipped_json": dumps(skipped),
                                        "spent_json": None if spent is None else dumps(spent)})

    def round(self, rid: int) -> Row | None:
        return self.get("rounds", rid)

    def round_ids(self) -> list[int]:
        return [r["id"] for r in self.rows("SELECT id FROM rounds ORDER BY id")]

    # ------------------------------------------------------------ skills
    def skill_rows(self) -> list[Row]:
        """Every skill card row, most helpful first, then by name."""
        return self.rows("SELECT * FROM skills ORDER BY helped DESC, name")

    def skill_row(self, name: str) -> Row | None:
        rows = self.rows("SELECT * FROM skills WHERE name = ?", (name,))
        return rows[0] if rows else None

    def add_skill(self, row: Row) -> int:
        with self.tx():
            return self.insert("skills", dict(row, created_at=now(), updated_at=now()))

    def update_skill(self, sid: int, values: Row) -> None:
        with self.tx():
            self.update("skills", sid, dict(values, updated_at=now()))
