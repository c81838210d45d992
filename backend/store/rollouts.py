"""What evolution reads about training: rollouts, their labels, steps, policy versions.

Mixed into `Store`. Windows of steps are inclusive ranges (`lo`..`hi`).
`rollouts.labels` is a denormalised, comma-joined copy of a rollout's
diagnoses (the `diagnoses` table is the record); `join_labels` and
`split_labels` are the one place that format is written and read.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Queries, Row


REPLAY_COLUMNS = ("id", "step", "group_idx", "idx", "prompt", "completion", "finish", "completion_tokens",
                  "task_json", "obs_json", "domain", "task_id", "correct", "reward", "verdict", "labels", "advantage")
"""What a replay needs of a stored rollout: the harness's view, and what training stored to compare with."""
_REPLAY = ", ".join(REPLAY_COLUMNS)
_CHUNK = 500  # ids per `IN (...)`: well under SQLite's variable limit


def join_labels(labels: Iterable[str]) -> str:
    """The `rollouts.labels` text of a set of labels."""
    return ",".join(sorted(set(labels)))


def split_labels(text: str | None) -> set[str]:
    """The labels in a `rollouts.labels` text."""
    return set(filter(None, (text or "").split(",")))


class RolloutReads(Queries):
    """Repository methods over `rollouts`, `diagnoses`, `steps` and `policy_versions`."""

    # ------------------------------------------------------------ replay
    def recent_rollouts(self, after_step: int, step: int, limit: int) -> list[Row]:
        """Replay rows of steps `after_step` < s <= `step` (failed rollouts left out), newest first,
        at most `limit`."""
        return self.rows(f"SELECT {_REPLAY} FROM rollouts WHERE step > ? AND step <= ? "
                         "AND coalesce(status, 'ok') != 'error' ORDER BY id DESC LIMIT ?", (after_step, step, limit))

    def groups_through(self, step: int) -> list[tuple[int, int]]:
        """(step, group_idx) of every group at or before `step`, in order."""
        return [(r["step"], r["group_idx"]) for r in self.rows(
            "SELECT DISTINCT step, group_idx FROM rollouts WHERE step <= ? ORDER BY step, group_idx", (step,))]

    def group_rollouts(self, step: int, group_idx: int) -> list[Row]:
        """Replay rows of one group."""
        return self.rows(f"SELECT {_REPLAY} FROM rollouts WHERE step = ? AND group_idx = ?", (step, group_idx))

    def rollouts_by_id(self, ids: Iterable[int]) -> list[Row]:
        """Replay rows of these rollout ids (missing ids are skipped)."""
        ids, out = list(ids), []
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i:i + _CHUNK]
            out += self.rows(f"SELECT {_REPLAY} FROM rollouts WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        return out

    def rollout(self, rid: int) -> Row | None:
        return self.get("rollouts", rid)

    # ------------------------------------------------------------ aggregation
    def window_rollouts(self, lo: int, hi: int) -> list[Row]:
        """The rollouts of steps `lo`..`hi` that aggregation reads (failed ones left out), oldest first."""
        return self.rows(
            "SELECT id, step, group_idx, reward, correct, verdict, completion, completion_tokens, finish "
            "FROM rollouts WHERE step BETWEEN ? AND ? AND coalesce(status, 'ok') != 'error' ORDER BY id", (lo, hi))

    def window_diagnoses(self, lo: int, hi: int) -> list[Row]:
        """(rollout_id, label, validity) of every diagnosis of steps `lo`..`hi`."""
        return self.rows("SELECT rollout_id, label, validity FROM diagnoses WHERE step BETWEEN ? AND ?", (lo, hi))

    def window_steps(self, lo: int, hi: int) -> list[Row]:
        """The `steps` rows of steps `lo`..`hi`, in order."""
        return self.rows("SELECT * FROM steps WHERE step BETWEEN ? AND ? ORDER BY step", (lo, hi))

    # ------------------------------------------------------------ diagnostic revision
    def unlabeled_failures(self, lo: int, hi: int) -> list[Row]:
        """Rollouts of steps `lo`..`hi` the evaluator calls wrong that no diagnostic labelled
        (a `diagnostic_error` label does not count), oldest first."""
        return self.rows(
            "SELECT id, step, group_idx, completion, verdict, correct FROM rollouts r WHERE step BETWEEN ? AND ? "
            "AND coalesce(correct, 0) = 0 AND NOT EXISTS (SELECT 1 FROM diagnoses d WHERE d.rollout_id = r.id "
            "AND d.label != 'diagnostic_error') ORDER BY id", (lo, hi))

    def count_failures(self, lo: int, hi: int) -> int:
        """Rollouts of steps `lo`..`hi` the evaluator does not call correct."""
        return int(self.scalar("SELECT count(*) FROM rollouts WHERE step BETWEEN ? AND ? AND "
                               "coalesce(correct, 0) = 0", (lo, hi)) or 0)

    def correct_completions(self, lo: int, hi: int, limit: int) -> list[Row]:
        """{"completion"} of rollouts of steps `lo`..`hi` the evaluator calls correct, oldest first."""
        return self.rows("SELECT completion FROM rollouts WHERE step BETWEEN ? AND ? AND correct = 1 "
                         "ORDER BY id LIMIT ?", (lo, hi, limit))

    def count_rollouts_after(self, step: int) -> int:
        return int(self.scalar("SELECT count(*) FROM rollouts WHERE step > ?", (step,)) or 0)

    def label_fires(self, after_step: int, label: str) -> tuple[int, float]:
        """(times `label` fired after `after_step`, share of those rollouts the evaluator calls correct)."""
        row = self.rows("SELECT count(*) AS n, avg(coalesce(r.correct, 0)) AS c FROM diagnoses d "
                        "JOIN rollouts r ON r.id = d.rollout_id WHERE d.step > ? AND d.label = ?",
                        (after_step, label))[0]
        return int(row["n"] or 0), float(row["c"] or 0.0)

    # ------------------------------------------------------------ policy versions
    def policy_version_at(self, step: int) -> Row | None:
        """The newest policy version (checkpoint) saved at or before `step`."""
        rows = self.rows("SELECT * FROM policy_versions WHERE step <= ? ORDER BY step DESC LIMIT 1", (step,))
        return rows[0] if rows else None

    def latest_policy_version(self) -> Row | None:
        rows = self.rows("SELECT * FROM policy_versions ORDER BY id DESC LIMIT 1")
        return rows[0] if rows else None

    def policy_version_steps(self) -> list[int]:
        """The steps policy versions (checkpoints) were saved at, ascending."""
        return [r["step"] for r in self.rows("SELECT DISTINCT step FROM policy_versions ORDER BY step")]

    def validation_best_policy_version(self) -> Row | None:
        """The policy version of the best validation evaluation (the latest of a tie), or None
        when that was the base model or there is no validation evaluation."""
        best = self.rows("SELECT policy_version FROM evals WHERE split = 'validation' "
                         "ORDER BY accuracy DESC, id DESC LIMIT 1")
        if not best or not best[0]["policy_version"]:
            return None
        rows = self.rows("SELECT * FROM policy_versions WHERE id = ?", (best[0]["policy_version"],))
        return rows[0] if rows else None

