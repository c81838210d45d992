"""`score_all` on math runs the harness worker while the evaluator judges (the env's observations
never read the verdict), and scores exactly as the one-after-the-other order does."""

from __future__ import annotations

import random
import threading

from backend.envs.base import Task
from backend.harness.loader import load_default
from backend.rollout import Scored, score_all


def _items(n_groups: int = 8, group: int = 4) -> list[Scored]:
    rng = random.Random(0)
    out = []
    for g in range(n_groups):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        task = Task(id=f"t{g}", question=f"What is {a} + {b}?", answer=str(a + b), domain="math",
                    meta={"dataset": "basic_arithmetic"})
        for i in range(group):
            guess = a + b + rng.choice([0, 0, 1, -2])
            text = rng.choice([f"{a} + {b} = {guess}. <answer>{guess}</answer>", f"The sum is {guess}",
                               f"<answer>{guess}</answer>"])
            out.append(Scored(task=task, group=g, idx=i, prompt_text="", prompt_ids=[1], completion=text,
                              completion_ids=list(range(len(text) // 4 + 1)), loss_mask=[1] * (len(text) // 4 + 1),
                              finish=rng.choice(["stop", "stop", "length"]), verdict=None, obs={}))
    return out


class RecordingMathEnv:
    """The math env's evaluator and observations, recording which thread judged and what
    `observe` was given."""

    def __init__(self, observes_verdict: bool):
        from backend.envs.math import MathEnv

        self.env = MathEnv(["basic_arithmetic"])
        self.observes_verdict = observes_verdict
        self.judged_in: set[str] = set()
        self.observed: list = []

    def evaluate(self, task, completion):
        self.judged_in.add(threading.current_thread().name)
        return self.env.evaluate(task, completion)

    def observe(self, task, completion, verdict):
        self.observed.append(verdict)
        return self.env.observe(task, completion, verdict)


def _scored(items):
    return [(s.reward, s.labels, s.kept, s.advantage, s.verdict.correct, s.verdict.status, s.components, s.obs)
            for s in items]


def test_math_scores_alongside_the_evaluator_as_it_scores_after_it():
    from backend.envs.math import MathEnv

    assert MathEnv.observes_verdict is False
    harness = load_default("math")
    overlapped, sequential = _items(), _items()
    env_o, env_s = RecordingMathEnv(False), RecordingMathEnv(True)
    score_all(overlapped, harness, env_o, 128)
    score_all(sequential, harness, env_s, 128)
    assert _scored(overlapped) == _scored(sequential)
    assert any(s.advantage != 0 for s in overlapped) and any(s.verdict.correct for s in overlapped)
    assert env_o.judged_in == env_s.judged_in == {threading.main_thread().name}
    assert env_o.observed[:len(overlapped)] == [None] * len(overlapped)  # observed before any verdict
    assert all(v is not None for v in env_s.observed)
