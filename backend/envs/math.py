"""Math reasoning: reasoning-gym generators, judged by the dataset's own scorer.

The evaluator (`MathEnv.evaluate`) is `math_answer.check`: it takes one final
answer from the completion (the last <answer> tag, else a \\boxed{}, else an
"answer is" sentence, else a bare last line; nothing is evaluated, hedges and
conflicting answers are wrong), normalises what is harmless and scores it with
reasoning-gym's `score_answer` for the task's dataset, correct meaning full
score. Rules and conformance table: docs/evaluator.md. The harness cannot
change any of this; it only decides how rollouts are rewarded.
"""

from __future__ import annotations

import random

from . import math_answer
from .base import Task, Verdict

# Difficulty levels map to generator knobs; the harness's curriculum picks a level.
LEVELS = {
    "basic_arithmetic": [
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
        dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2),
        dict(min_terms=3, max_terms=5, min_digits=2, max_digits=3),
    ],
    "chain_sum": [
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
        dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2),
        dict(min_terms=3, max_terms=5, min_digits=2, max_digits=3),
    ],
}


def extract_lenient(text: str) -> str | None:
    """The evaluator's answer for a task without a dataset (kept for tests/synthetic_run.py):
    math_answer's extraction with a number or fraction answer, or None."""
    v, status = math_answer.extract(text, "number")
    return v if status == "answered" else None


def answers_match(gold: str, pred: str | None) -> bool:
    """Equal single values (math_answer.same_value); nothing is evaluated."""
    return math_answer.same_value(pred, gold)


class MathEnv:
    domain = "math"
    multi_turn = False

    def __init__(self, datasets: list[str], heldout_seed: int = 99991, heldout_n: int = 32,
                 heldout_level: int = 1):
        import reasoning_gym  # heavy (pulls in matplotlib): only where tasks are made

        unknown = [d for d in datasets if d not in reasoning_gym.factory.DATASETS]
        if unknown:
            raise ValueError(f"unknown reasoning-gym dataset(s): {', '.join(unknown)}")
        self.datasets = datasets
        self.heldout_seed = heldout_seed
        self.heldout_n = heldout_n
        self.heldout_level = heldout_level
        self._heldout: list[Task] | None = None

    def _make(self, name: str, level: int, seed: int, n: int) -> list[Task]:
        knobs = LEVELS.get(name, [{}])
        kw = knobs[max(0, min(level, len(knobs) - 1))]
        import reasoning_gym

        ds = reasoning_gym.create_dataset(name, seed=seed, size=n, **kw)
        out = []
        for i in range(n):
            e = ds[i]
            meta = {k: v for k, v in e["metadata"].items() if isinstance(v, (str, int, float))}
            # the generator's knobs: score_answer of some datasets reads its config (decimal_arithmetic)
            meta.update(dataset=name, level=level, rg_config=dict(kw))
            out.append(Task(f"{name}:{level}:{seed}:{i}", "math", e["question"], str(e["answer"]), meta))
        return out

    def sample_tasks(self, n: int, rng: random.Random, curriculum: dict) -> list[Task]:
        weights = curriculum.get("datasets") or {d: 1.0 for d in self.datasets}
        names = [d for d in weights if d in self.datasets] or self.datasets
        level = int(curriculum.get("level", 1))
        tasks = []
        for _ in range(n):
            name = rng.choices(names, weights=[float(weights.get(d, 1.0)) for d in names])[0]
            # Training seeds live far from the held-out seed: the sets never mix.
            seed = rng.randrange(1, 2**31 - 1)
            if seed == self.heldout_seed:
                seed += 1
            tasks.append(self._make(name, level, seed, 1)[0])
        return tasks

    def heldout_tasks(self) -> list[Task]:
        if self._heldout is None:
            per = -(-self.heldout_n // len(self.datasets))
            tasks = [t for d in self.datasets for t in self._make(d, self.heldout_level, self.heldout_seed, per)]
            self._heldout = tasks[: self.heldout_n]
        return self._heldout

    TEST_SEED_OFFSET = 10_000_019
    """Test items come from seeds this far above the validation seed: reasoning-gym draws item i
    of seed s from Random(s + i), so the two seed ranges never meet below this many items."""

    def _frozen(self, seed: int, n: int, avoid: set[str] = frozenset()) -> list[Task]:
        """`n` held-out tasks at the held-out level, spread over the datasets (questions in `avoid` skipped)."""
        per = -(-n // len(self.datasets))
        out: list[Task] = []
        for d in self.datasets:
            got, size = [], per
            while len(got) < per:
                got = [t for t in self._make(d, self.heldout_level, seed, size) if t.question not in avoid][:per]
                if size >= 4 * per + 16:  # a tiny problem space: take what is unique
                    break
                size += per - len(got) + 4
            out += got
        return out[:n]

    def validation_tasks(self, n: int | None = None) -> list[Task]:
        """The validation set (the gate may read it): the held-out seed, as `heldout_tasks` always was."""
        n = self.heldout_n if n is None else n
        key = ("validation", n)
        cache = self.__dict__.setdefault("_splits", {})
        if key not in cache:
            cache[key] = self._frozen(self.heldout_seed, n)
        return cache[key]

    def test_tasks(self, n: int | None = None, n_val: int | None = None) -> list[Task]:
        """The test set (reported only): its own seed range, and no question the validation set
        (of `n_val` problems) also asks."""
        n = self.heldout_n if n is None else n
        key = ("test", n, n_val)
        cache = self.__dict__.setdefault("_splits", {})
        if key not in cache:
            avoid = {t.question for t in self.validation_tasks(n_val)}
            cache[key] = self._frozen(self.heldout_seed + self.TEST_SEED_OFFSET, n, avoid)
        return cache[key]

    def evaluate(self, task: Task, completion: str) -> Verdict:
        try:
            ok, extracted, status = math_answer.check(task.meta.get("dataset", ""), task.question, task.answer,
                                                      completion, task.meta)
            return Verdict(ok, 1.0 if ok else 0.0, status, {"extracted": extracted})
        except Exception as e:  # a bad rollout is data, not a crash
            return Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"})

    def observe(self, task: Task, completion: str, verdict: Verdict) -> dict:
        return {}
