"""What the report, compare and run-summary tools read from a finished (or running) run.

Mixed into `Store`. These stores are often opened read-only and may come from
an older evotui: a column a migration added is asked for only where it exists
(`reader.has_columns`), so an old run reads as it was written.
"""

from __future__ import annotations

from .base import Queries, Row


class ReportReads(Queries):
    """Read-only repository methods for reports."""

    def _has(self, table: str, cols: tuple[str, ...]) -> bool:
        from .reader import has_columns  # reader imports this package's JSON helpers

        return has_columns(self, table, cols)  # type: ignore[arg-type]  # a Store has RunDB's read methods

    def evals(self, split: str | None = None) -> list[Row]:
        """Held-out evaluations (step, accuracy, agreement, results_json) of one split, or of all
        splits when `split` is None, in step order. Before the two sets (m003) every evaluation
        was the gate's: validation."""
        cols = "step, accuracy, agreement, results_json"
        if split is None:
            return self.rows(f"SELECT {cols} FROM evals ORDER BY step, id")
        if not self._has("evals", ("split",)):
            return self.rows(f"SELECT {cols} FROM evals ORDER BY step, id") if split == "validation" else []
        return self.rows(f"SELECT {cols} FROM evals WHERE split = ? ORDER BY step, id", (split,))

    def policy_version_of_step(self, step: int) -> Row | None:
        """The policy version `step` saved (the newest, should a resumed step have saved twice)."""
        rows = self.rows("SELECT * FROM policy_versions WHERE step = ? ORDER BY id DESC LIMIT 1", (step,))
        return rows[0] if rows else None

    def evals_of_policy(self, version: int) -> list[Row]:
        """Evaluation rows (step, split, accuracy, n) of one policy version, oldest first."""
        return self.rows("SELECT step, split, accuracy, n FROM evals WHERE policy_version = ? ORDER BY id",
                         (version,))

    def evals_after(self, eval_id: int) -> list[Row]:
        """Evaluation rows (id, step, split, accuracy, n) written after `eval_id`, in order."""
        return self.rows("SELECT id, step, split, accuracy, n FROM evals WHERE id > ? ORDER BY id", (eval_id,))

    def rollouts_page(self, after_id: int, limit: int) -> list[Row]:
        """Up to `limit` stored rollouts with ids above `after_id`, in id order (for `evotui export`)."""
        return self.rows("SELECT * FROM rollouts WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))

    def diagnoses_of(self, rollout_ids: list[int]) -> list[Row]:
        """(rollout_id, label, evidence, validity) of the given rollouts, in id order."""
        return self.rows_in("SELECT rollout_id, label, evidence, validity FROM diagnoses WHERE rollout_id IN ({ids}) "
                            "ORDER BY id", rollout_ids)

    def turns_of(self, rollout_ids: list[int]) -> list[Row]:
        """The tool-using turns of the given rollouts (multi-turn domains), in order."""
        return self.rows_in("SELECT rollout_id, turn, role, tool, args_json, content, tokens FROM turns "
                            "WHERE rollout_id IN ({ids}) ORDER BY rollout_id, turn, id", rollout_ids)

    def reported_evals(self) -> list[Row]:
        """The reported held-out set in order of writing: test, or before the two sets (m003)
        the one held-out set there was."""
        if not self._has("evals", ("split",)):
            return self.rows("SELECT step, accuracy FROM evals ORDER BY id")
        return self.rows("SELECT step, accuracy FROM evals WHERE split = 'test' ORDER BY id")

    def step_series(self) -> list[Row]:
        """Per-step curves: step, dead_group_frac, agreement, reward_mean, total_ms, and the training
        record the invariance check compares (loss, grad_norm, entropy)."""
        return self.rows("SELECT step, dead_group_frac, agreement, reward_mean, total_ms, loss, grad_norm, entropy "
                         "FROM steps ORDER BY step")

    def train_rollout_count(self) -> int:
        return int(self.scalar("SELECT coalesce(sum(n_rollouts), 0) FROM steps") or 0)

    def train_token_count(self) -> int:
        """Completion tokens the training steps generated."""
        return int(self.scalar("SELECT coalesce(sum(tokens), 0) FROM steps") or 0)

    def probe_rollout_count(self) -> int:
        """Rollouts the evolution generated outside training (probes)."""
        return int(self.scalar("SELECT coalesce(sum(n_rollouts), 0) FROM backtests WHERE mode = 'probe'") or 0)

    def promotions_with_backtests(self) -> list[Row]:
        """Promoted and rolled-back interventions (all columns), each once, with its last backtest's
        `bt_metrics` and `bt_verdict` (the one that decided it: a candidate rebased onto a newer
        version before its promotion was backtested again), oldest first."""
        return self.rows("SELECT i.*, b.metrics_json AS bt_metrics, b.verdict AS bt_verdict FROM interventions i "
                         "LEFT JOIN backtests b ON b.id = (SELECT MAX(id) FROM backtests "
                         "WHERE intervention_id = i.id) "
                         "WHERE i.status IN ('promoted', 'rolled_back') ORDER BY i.id")

    def promoted_changes(self) -> list[Row]:
        """id, title, code, params_json of promoted and rolled-back interventions, in promotion order."""
        return self.rows("SELECT id, title, code, params_json FROM interventions WHERE status IN "
                         "('promoted', 'rolled_back') ORDER BY promoted_step, id")

    def blocked_by_validity(self) -> list[Row]:
        """Interventions that failed because a validity diagnostic blocked them."""
        return self.rows("SELECT * FROM interventions WHERE status = 'failed' AND reason LIKE '%validity%' "
                         "ORDER BY id")

    def skill_summaries(self) -> list[Row]:
        return self.rows("SELECT name, domain, trigger_json, evidence_json FROM skills ORDER BY id")

    def backtest_decisions(self) -> list[Row]:
        """Every backtest with its intervention (id, title, kind, status), its decision's
        statistics (NULL before m003) and `same_update` (NULL before m010)."""
        from .reader import DECISION_COLS

        cols = ", ".join(f"b.{c}" for c in DECISION_COLS) if self._has("backtests", DECISION_COLS) else \
            ", ".join(f"NULL AS {c}" for c in DECISION_COLS)
        cols += ", b.same_update" if self._has("backtests", ("same_update",)) else ", NULL AS same_update"
        return self.rows(f"SELECT i.id, i.title, i.kind, i.status, b.mode, b.verdict, b.reason, {cols} "
                         "FROM backtests b JOIN interventions i ON i.id = b.intervention_id ORDER BY b.id")

    def step_metrics(self) -> list[Row]:
        """step, created_at (when the step was stored) and metrics_json of every step."""
        return self.rows("SELECT step, created_at, metrics_json FROM steps ORDER BY step")

    def log_lines(self, containing: str) -> list[Row]:
        """ts, step, level and message of the run's log lines whose message contains `containing`."""
        return self.rows("SELECT ts, step, level, message FROM events WHERE kind = 'log' "
                         "AND instr(message, ?) > 0 ORDER BY id", (containing,))

    def round_skips(self) -> list[Row]:
        """step and skipped_json of every round (none before m003)."""
        if not self._has("rounds", ("skipped_json",)):
            return []
        return self.rows("SELECT step, skipped_json FROM rounds ORDER BY id")
