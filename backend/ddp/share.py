"""A rank's share of a data-parallel step, judged and scored on the rank that generated it.

The evaluator (`env.evaluate`, `env.observe`) and the harness's reward components and
labels are functions of one rollout, so each rank runs them on its own share, in its own
sandboxed harness worker, at the same time as the others; only plain data comes back to
rank 0 (`Judged`), with the JSON texts of each rollout's stored row that judging fixes
(`rollout.judged_json`), so rank 0 does not encode every rank's rollouts before it stores
them. Rank 0 then applies what needs the whole batch (weighted totals, filters,
dead groups, group-relative advantages) through the one `apply_harness`, with `Prescored`
standing in for the worker: a group is never split for its statistics, and the step scores
and trains exactly as on one process (tests/test_distributed.py compares them).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.envs.base import Verdict
from backend.harness.check import HarnessError
from backend.harness.client import Scores, WorkerFailure, shared_worker
from backend.rollout import Scored, as_rollout, evaluate_all, from_generation, judged_json
from backend.types import Generation

Prompt = tuple
"""(group, index in the group, task, prompt text, prompt token ids): one rollout to sample."""


@dataclass
class Judged:
    """What rank 0 needs of one rollout of another rank's share besides its generation."""

    verdict: Verdict
    obs: dict
    eval_ms: float
    scores: Scores
    encoded: dict[str, str]  # `judged_json`: part of its stored row, encoded on the rank that judged it


def judge(items: list[Scored], env, code: str, weights: dict[str, float], max_new_tokens: int) -> list[Judged]:
    """The evaluator's verdicts and the harness's scores of `items` (this rank's share).
    Raises HarnessError or WorkerFailure as `apply_harness` does."""
    evaluate_all(items, env)
    views = [as_rollout(s, max_new_tokens).view() for s in items]
    scores = shared_worker().apply(code, weights, views)
    out = [Judged(s.verdict, s.obs, s.eval_ms, sc, judged_json(s)) for s, sc in zip(items, scores)]
    for s, j in zip(items, out):
        s.encoded = j.encoded
    return out


def judged_rollout(prompt: Prompt, gen: Generation, judged: Judged) -> Scored:
    """Rank 0's copy of a rollout another rank generated and judged: its verdict, observations,
    evaluator time and row texts as that rank made them (the harness's scores go to `Prescored`)."""
    s = from_generation(prompt, gen)
    s.verdict, s.obs, s.eval_ms, s.encoded = judged.verdict, judged.obs, judged.eval_ms, judged.encoded
    return s


def failure(e: Exception) -> tuple[str, str]:
    """A harness or worker failure as plain data, for rank 0 to raise again (`raise_failure`):
    the active harness failing stops the run cleanly on any rank, as on one process."""
    return ("harness" if isinstance(e, HarnessError) else "worker", str(e))


def raise_failure(rank: int, why: tuple[str, str]) -> None:
    kind, msg = why
    if kind == "harness":
        raise HarnessError(msg)
    raise WorkerFailure(f"{msg} (on rank {rank})")


class Prescored:
    """The harness worker's answer for a batch every rank already scored, in batch order:
    `apply_harness(harness, batch, worker=Prescored(code, scores))`."""

    def __init__(self, code: str, scores: list[Scores]):
        self.code = code
        self.scores = scores

    def apply(self, code: str, weights: dict[str, float], views: list[dict], limit_s: float | None = None
              ) -> list[Scores]:
        if code != self.code or len(views) != len(self.scores):
            raise ValueError(f"the ranks scored {len(self.scores)} rollouts under another harness or batch "
                             f"than the {len(views)} asked for")
        return self.scores
