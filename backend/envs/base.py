"""What every domain provides: tasks, an evaluator the harness cannot change,
and the evidence the harness may look at.

A domain is an `Env`. Single-turn domains (math, code) turn one completion
into a verdict. Multi-turn domains (swe) also implement `run_episodes`, which
drives a batch of episodes through the policy's `generate` and returns one
`Episode` per task copy, with every turn recorded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Task:
    id: str
    domain: str
    question: str
    answer: str | None = None
    """The gold answer (math), the entry point (code), or None (swe: hidden tests decide)."""
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"id": self.id, "domain": self.domain, "question": self.question,
                "answer": self.answer, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        return cls(d["id"], d["domain"], d["question"], d.get("answer"), d.get("meta") or {})


@dataclass
class Verdict:
    """The evaluator's judgement. Never computed by the harness."""

    correct: bool
    score: float
    status: str
    """e.g. correct, wrong, no_answer, passed, failed, error, timeout."""
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"correct": self.correct, "score": self.score, "status": self.status, "detail": self.detail}


@dataclass
class Episode:
    """A multi-turn rollout: the token stream the trainer sees, with a loss mask."""

    completion: str
    """Readable transcript of everything after the prompt."""
    completion_ids: list[int]
    loss_mask: list[int]
    """1 for tokens the policy generated, 0 for tool output inserted by the env."""
    finish: str
    """submitted, turns, tokens, error."""
    turns: list[dict]
    """One dict per turn: role, tool, args, content, tokens, ms."""
    obs: dict = field(default_factory=dict)
    verdict: Verdict | None = None


class Env(Protocol):
    domain: str
    multi_turn: bool

    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        """Training tasks for one step, shaped by the harness's CURRICULUM dict."""

    def heldout_tasks(self) -> list[Task]:
        """The frozen held-out set (never overlaps training tasks)."""

    def evaluate(self, task: Task, completion: str) -> Verdict:
        """The task's own verifier. Must not raise: errors become a Verdict."""

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        """Evidence the harness may read besides the text (e.g. test results for code). An env
        whose observations never read the verdict says so with `observes_verdict = False`; its
        harness then scores a batch while the evaluator judges it (`rollout.score_all`), and
        `observe` is called with `verdict` None."""


def message_prompt(system: str, template: str, task: Task) -> list[dict[str, Any]]:
    """Chat messages for a single-turn task from the harness's PROMPT."""
    fields = {k: v for k, v in task.meta.items() if isinstance(v, (str, int, float))}
    user = template.format(question=task.question, **fields)
    msgs = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": user})
    return msgs
