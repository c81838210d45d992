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
from collections.abc import Iterator
from decimal import localcontext

from . import math_answer
from .base import Task, Verdict
from .split import in_validation

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
    # Each dataset's own config knobs, from one-step problems a 135M model sometimes solves
    # (level 0) up to about the dataset's defaults (level 3).
    "products": [
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
        dict(min_terms=2, max_terms=2, min_digits=2, max_digits=3),
        dict(min_terms=2, max_terms=3, min_digits=2, max_digits=5),
    ],
    "gcd": [
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=12),
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=100),
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=1000),
        dict(min_numbers=2, max_numbers=3, min_value=1, max_value=1000),
    ],
    "lcm": [
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=6),
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=30),
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=100),
        dict(min_numbers=2, max_numbers=3, min_value=1, max_value=100),
    ],
    "fraction_simplification": [
        dict(min_value=1, max_value=6, min_factor=2, max_factor=3, styles=("plain",)),
        dict(min_value=1, max_value=20, min_factor=2, max_factor=10, styles=("plain",)),
        dict(min_value=1, max_value=100, min_factor=1, max_factor=50, styles=("plain",)),
        dict(min_value=1, max_value=1000, min_factor=1, max_factor=100),
    ],
    "leg_counting": [
        dict(min_animals=1, max_animals=1, min_instances=1, max_instances=3),
        dict(min_animals=1, max_animals=2, min_instances=1, max_instances=5),
        dict(min_animals=2, max_animals=5, min_instances=1, max_instances=10),
        dict(min_animals=3, max_animals=10, min_instances=1, max_instances=15),
    ],
    "decimal_arithmetic": [
        dict(min_num_decimal_places=1, max_num_decimal_places=1, min_terms=2, max_terms=2, precision=6),
        dict(min_num_decimal_places=1, max_num_decimal_places=2, min_terms=2, max_terms=3, precision=8),
        dict(min_num_decimal_places=2, max_num_decimal_places=3, min_terms=2, max_terms=4, precision=10),
        dict(min_num_decimal_places=3, max_num_decimal_places=3, min_terms=2, max_terms=6, precision=12),
    ],
    "decimal_chain_sum": [
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, min_decimal_places=1, max_decimal_places=1),
        dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2, min_decimal_places=1, max_decimal_places=2),
        dict(min_terms=2, max_terms=4, min_digits=1, max_digits=3, min_decimal_places=1, max_decimal_places=3),
        dict(min_terms=2, max_terms=6, min_digits=1, max_digits=4, min_decimal_places=1, max_decimal_places=4),
    ],
    "number_format": [
        dict(min_num_candidates=2, max_num_candidates=2, min_n=1, max_n=100, max_delta=10.0),
        dict(min_num_candidates=2, max_num_candidates=3, min_n=100, max_n=100_000, max_delta=10.0),
        dict(min_num_candidates=2, max_num_candidates=4, min_n=1000, max_n=10_000_000, max_delta=10.0),
        dict(min_num_candidates=2, max_num_candidates=5, min_n=1000, max_n=1_000_000_000, max_delta=10.0),
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
    observes_verdict = False  # `observe` returns nothing: the harness scores while the evaluator judges

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

    def _make(self, name: str, level: int, seed: int, n: int) -> list[Task]:
        return list(self._stream(name, level, seed, n))

    def _stream(self, name: str, level: int, seed: int, n: int) -> Iterator[Task]:
        """Items 0..n-1 of the dataset at `level` and `seed`, made one at a time (reasoning-gym
        makes item i from Random(seed + i), so a prefix is the same whatever `n` is)."""
        knobs = LEVELS.get(name, [{}])
        kw = knobs[max(0, min(level, len(knobs) - 1))]
        import reasoning_gym

        with localcontext():  # a generator may set the decimal context (decimal_arithmetic does): keep it inside
            ds = reasoning_gym.create_dataset(name, seed=seed, size=n, **kw)
        for i in range(n):
            with localcontext():
                e = ds[i]
            meta = {k: v for k, v in e["metadata"].items() if isinstance(v, (str, int, float))}
            # the generator's knobs: score_answer of some datasets reads its config (decimal_arithmetic)
            meta.update(dataset=name, level=level, rg_config=dict(kw))
            yield Task(f"{name}:{level}:{seed}:{i}", "math", e["question"], str(e["answer"]), meta)

    def task_by_id(self, task_id: str) -> Task:
        """The task an id names ("dataset:level:seed:index", what the store keeps), made again:
        an id stays readable whichever rule drew the held-out sets it came from."""
        name, level, seed, i = task_id.rsplit(":", 3)
        *_, task = self._stream(name, int(level), int(seed), int(i) + 1)
        return task

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
        """The validation set at its configured size (what the gate has always read)."""
        return self.validation_tasks()

    DRAWS_PER_TASK = 8
    """How many items of the held-out stream a side may look at per task it wants (plus 64):
    a dataset whose problem space is smaller gives fewer tasks, each question once."""

    def _frozen(self, side: str, n: int) -> list[Task]:
        """`n` held-out tasks of `side` ("validation" or "test") at the held-out level, spread over
        the datasets. Both sides read the same stream (the held-out seed) and keep a question on
        the side a hash of it picks (`split.in_validation`), each question once. So validation and
        test are samples of one distribution that share no question, and a question asked twice
        by the generator is not counted twice. A problem space too small for `n` gives what it has,
        and every dataset then gives as many as the smallest, so the mix stays even on both sides."""
        per = -(-n // len(self.datasets))
        by_dataset = []
        for d in self.datasets:
            got: list[Task] = []
            seen: set[str] = set()
            for t in self._stream(d, self.heldout_level, self.heldout_seed, self.DRAWS_PER_TASK * per + 64):
                if t.question in seen or in_validation(f"math:{d}:{t.question}") != (side == "validation"):
                    continue
                seen.add(t.question)
                got.append(t)
                if len(got) == per:
                    break
            by_dataset.append(got)
        even = min(len(g) for g in by_dataset)
        return [t for g in by_dataset for t in g[:even]][:n]

    def validation_tasks(self, n: int | None = None) -> list[Task]:
        """The validation set (the gate may read it); the first `n` of a longer one are the same tasks
        when every dataset has room."""
        return self._split("validation", self.heldout_n if n is None else n)

    def test_tasks(self, n: int | None = None) -> list[Task]:
        """The test set (reported only): no question of any validation set, whatever its size."""
        return self._split("test", self.heldout_n if n is None else n)

    def _split(self, side: str, n: int) -> list[Task]:
        cache = self.__dict__.setdefault("_splits", {})
        if (side, n) not in cache:
            cache[(side, n)] = self._frozen(side, n)
        return cache[(side, n)]

    def reference_solution(self, task: Task, answer_tag: bool = True) -> str | None:
        """What a hint shows the start of (engine-side only, never sent to the harness): the
        dataset's worked solution where reasoning-gym's entry has one (`answer_cot`), else the
        final answer in the harness's answer format (`<answer>..</answer>` when its prompt asks
        for the tag). None for a task without an answer.

        >>> MathEnv.reference_solution(None, Task("t", "math", "1+1", "2"))
        '<answer>2</answer>'
        """
        worked = task.meta.get("answer_cot")
        if isinstance(worked, str) and worked.strip():
            final = f"<answer>{task.answer}</answer>" if answer_tag else str(task.answer)
            return f"{worked.strip()}\n{final}"
        if task.answer is None:
            return None
        return f"<answer>{task.answer}</answer>" if answer_tag else str(task.answer)

    def curriculum_levels(self) -> tuple[int, int]:
        """The levels CURRICULUM["level"] can take for this run's datasets (0..the most any has)."""
        return 0, max(len(LEVELS[d]) - 1 for d in self.datasets) if any(d in LEVELS for d in self.datasets) else 0

    def has_levels(self, task: Task) -> bool:
        """Whether the task's dataset has levels (its groups tell the curriculum rule about the level)."""
        return task.meta.get("dataset") in LEVELS

    def evaluate(self, task: Task, completion: str) -> Verdict:
        try:
            ok, extracted, status = math_answer.check(task.meta.get("dataset", ""), task.question, task.answer,
                                                      completion, task.meta)
            return Verdict(ok, 1.0 if ok else 0.0, status, {"extracted": extracted})
        except Exception as e:  # a bad rollout is data, not a crash
            return Verdict(False, 0.0, "error", {"error": f"{type(e).__name__}: {e}"})

    def observe(self, task: Task, completion: str, verdict: Verdict | None) -> dict:
        return {}
