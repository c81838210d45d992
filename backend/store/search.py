"""What the proposer's search asks: move outcomes, the frontier's children, history, cost.

Mixed into `Store`; plain rows back.

    >>> store.move_history()["SAMPLING.temperature"][0]          # doctest: +SKIP
    {'id': 7, 'status': 'failed', 'from': 1.0, 'to': 0.8, 'step': 0.2}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from backend.types import Backtest

from .base import Queries, Row, loads
from .records import backtest_from_row


class SearchReads(Queries):
    """Read-only repository methods for the offline and LLM proposers and the search budget."""

    def move_history(self) -> dict[str, list[Row]]:
        """Every earlier move of each search-space knob, oldest first:
        {knob: [{id, status, from, to, step, mode, ci_low, ci_high, same_update}]}, the last four from
        its latest backtest (None before one): how it was judged, the interval of its effect, and
        whether its replay left training's update as it was (1)."""
        out: dict[str, list[Row]] = {}
        for r in self.rows("SELECT i.id, i.status, i.params_json, b.mode, b.ci_low, b.ci_high, b.same_update "
                           "FROM interventions i LEFT JOIN backtests b ON b.id = (SELECT MAX(id) FROM backtests "
                           "WHERE intervention_id = i.id) WHERE i.params_json LIKE '%\"knob\"%' ORDER BY i.id"):
            p = loads(r["params_json"], {}) or {}
            if isinstance(p.get("knob"), str):
                out.setdefault(p["knob"], []).append({"id": r["id"], "status": r["status"], "from": p.get("from"),
                                                      "to": p.get("to"), "step": p.get("step"), "mode": r["mode"],
                                                      "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                                                      "same_update": r["same_update"]})
        return out

    def live_versions(self) -> list[Row]:
        """Harness versions a proposer may branch from (active and superseded; rolled-back ones are
        out), the active one first, then newest first."""
        return self.rows("SELECT * FROM harness_versions WHERE status IN ('active', 'superseded') "
                         "ORDER BY (status = 'active') DESC, id DESC")

    def version_parents(self) -> dict[int, int | None]:
        """{version: its parent version} for every harness version of the run."""
        return {v["id"]: v["parent"] for v in self.rows("SELECT id, parent FROM harness_versions")}

    def children_of(self, version_ids: list[int]) -> dict[int, list[Row]]:
        """{version: [{id, status, target, kind, params_json}]} of the candidates built on each
        version (proposals that never became code are left out)."""
        out: dict[int, list[Row]] = {v: [] for v in version_ids}
        for r in self.rows_in("SELECT id, parent_version, status, target, kind, params_json FROM interventions "
                              "WHERE code != '' AND parent_version IN ({ids}) ORDER BY id", version_ids):
            out[r["parent_version"]].append(r)
        return out

    def proposal_history(self, limit: int = 12) -> list[Row]:
        """The latest proposals with their last backtest, newest first: {id, title, kind, target,
        proposer, status, reason, hypothesis, params_json, mode, verdict, effect, ci_low, ci_high}."""
        return self.rows(
            "SELECT i.id, i.title, i.kind, i.target, i.proposer, i.status, i.reason, i.hypothesis, i.params_json, "
            "b.mode, b.verdict, b.effect, b.ci_low, b.ci_high FROM interventions i "
            "LEFT JOIN backtests b ON b.id = (SELECT max(id) FROM backtests WHERE intervention_id = i.id) "
            "ORDER BY i.id DESC LIMIT ?", (limit,))

    def diagnoses_by_rollout(self, rollout_ids: list[int]) -> dict[int, list[Row]]:
        """{rollout id: [{label, evidence}]} for these rollouts."""
        out: dict[int, list[Row]] = {i: [] for i in rollout_ids}
        for d in self.rows_in("SELECT rollout_id, label, evidence FROM diagnoses WHERE rollout_id IN ({ids}) "
                              "ORDER BY id", rollout_ids):
            out[d["rollout_id"]].append({"label": d["label"], "evidence": d["evidence"]})
        return out

    def backtest_costs(self) -> list[Row]:
        """One row per backtest: {round_id, mode, n_rollouts, ms}, in order."""
        return self.rows("SELECT i.round_id, b.mode, coalesce(b.n_rollouts, 0) AS n_rollouts, "
                         "coalesce(b.ms, 0) AS ms FROM backtests b JOIN interventions i ON i.id = b.intervention_id "
                         "ORDER BY b.id")

    def backtests(self) -> list[Backtest]:
        """Every backtest of the run, oldest first (the search memory's tries: `evolve/search_memory.py`)."""
        return [backtest_from_row(r) for r in self.rows("SELECT * FROM backtests ORDER BY id")]

    def round_steps(self) -> dict[int, int]:
        """{round id: the step it ran at} for every round of the run."""
        return {r["id"]: r["step"] for r in self.rows("SELECT id, step FROM rounds")}

    def search_debited(self) -> int:
        """Rollouts the run's steps drew fewer to pay for its search (`train.search_budget`)."""
        return int(self.scalar("SELECT coalesce(sum(json_extract(metrics_json, '$.search_debited')), 0) "
                               "FROM steps") or 0)

    def training_cost(self) -> Row:
        """{rollouts, ms}: what training generated, and how long its steps took in all."""
        row = self.rows("SELECT coalesce(sum(n_rollouts), 0) AS rollouts, coalesce(sum(total_ms), 0) AS ms "
                        "FROM steps")[0]
        return {"rollouts": int(row["rollouts"]), "ms": float(row["ms"])}

    def latest_failure_table(self) -> list[Row]:
        """The failure table the newest round read ([] before the first round)."""
        rows = self.rows("SELECT failure_table_json FROM rounds ORDER BY id DESC LIMIT 1")
        return (loads(rows[0]["failure_table_json"], []) or []) if rows else []

    def round_outcomes(self) -> list[Row]:
        """Per round, in order: {round_id, step, tried, passed, inconclusive, failed, knobs, error,
        spent}: the backtest verdicts of its candidates (kept after a later promotion or veto), the
        search-space knobs its moves explored, the error that ended the round (or None), and,
        for a round that found no untried move its gate could judge, the knobs left for a trial
        (or None)."""
        rounds = {r["id"]: {"round_id": r["id"], "step": r["step"], "tried": 0, "passed": 0, "inconclusive": 0,
                            "failed": 0, "knobs": [],
                            "error": r["summary"][len("error: "):] if (r["summary"] or "").startswith("error: ")
                            else None, "spent": loads(r["spent_json"], None)}
                  for r in self.rows("SELECT id, step, summary, spent_json FROM rounds ORDER BY id")}
        for r in self.rows("SELECT round_id, history_json, params_json FROM interventions "
                           "WHERE round_id IS NOT NULL ORDER BY id"):
            e = rounds.get(r["round_id"])
            if e is None:
                continue
            e["tried"] += 1
            seen = {h.get("to") for h in loads(r["history_json"], []) or [] if isinstance(h, dict)}
            e[next((v for v in ("passed", "inconclusive") if v in seen), "failed")] += 1
            knob = (loads(r["params_json"], {}) or {}).get("knob")
            if knob and knob not in e["knobs"]:
                e["knobs"].append(knob)
        return list(rounds.values())


class SearchOver(SearchReads):
    """The search's reads over any object with `rows(sql, params)`, such as the TUI's read-only
    `reader.RunDB` (which has no `Store` methods and opens no sqlite-utils)."""

    def __init__(self, db: Any) -> None:  # deliberately not Queries.__init__: `db` owns the connection
        self._db = db

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        return list(self._db.rows(sql, tuple(params)))
