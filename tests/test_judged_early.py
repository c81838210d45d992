"""Rollouts judged while the rest of their batch decodes (`FastGenerator.generate`'s `on_finished`,
`rollout.JudgedEarly`).

The engine hands over rows that stopped, with the generations it then returns for them, and
samples exactly what it samples without the callback; the loop stores the same rollouts,
verdicts included, whether its rows were judged early or after the batch.
"""

from __future__ import annotations

import pytest
import torch

from test_fastgen import Tok, tiny
from test_policy_versions import _cfg, _engine

from backend.policy.fastgen import CHECK_EVERY, FastGenerator
from backend.progress import StepProgress


def test_the_engine_hands_over_stopped_rows_and_samples_the_same():
    model = tiny()
    prompts = [[5 + i % 7, 6, 7 + i % 3] for i in range(48)]
    eng = FastGenerator(model, Tok(), "cpu")
    torch.manual_seed(0)
    plain = eng.generate(prompts, 3 * CHECK_EVERY, temperature=1.0)
    handed: list[tuple[int, object]] = []
    torch.manual_seed(0)
    streamed = eng.generate(prompts, 3 * CHECK_EVERY, temperature=1.0,
                            on_finished=lambda rows, gens: handed.extend(zip(rows, gens)))
    assert [(g.ids, g.logprobs, g.finish) for g in streamed] == [(g.ids, g.logprobs, g.finish) for g in plain]
    stopped_in_time = [r for r, g in enumerate(plain) if g.finish == "stop" and len(g.ids) <= 2 * CHECK_EVERY]
    assert stopped_in_time, "no row stopped early enough to be handed over: the test needs some"
    rows = [r for r, _ in handed]
    assert len(rows) == len(set(rows)) and set(stopped_in_time) <= set(rows)
    assert all(streamed[r] is g and g.finish == "stop" for r, g in handed)  # the very generations returned


class Reporting:
    """A generator that reports its rows as the fast engine does: after the batch, the first half."""

    interruptible = False
    reports_finished = True

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, on_finished=None):
        gens = self.inner.generate(prompts, max_new_tokens, temperature, top_p)
        half = list(range(len(gens) // 2))
        if on_finished is not None:
            on_finished(half, [gens[r] for r in half])
        return gens


@pytest.mark.slow
def test_a_run_stores_the_same_rollouts_judged_early_or_late(tmp_path, tiny_model, spread_harness, monkeypatch):
    from backend import rollout

    judged = []

    class Counting(rollout.JudgedEarly):
        def __call__(self, rows, gens):
            judged.extend(rows)
            super().__call__(rows, gens)

    monkeypatch.setattr("backend.loop.JudgedEarly", Counting)
    from backend.harness.client import HarnessWorker

    sent: dict[str, list[int]] = {}
    apply = HarnessWorker.apply
    monkeypatch.setattr(HarnessWorker, "apply", lambda self, code, weights, views, *a: (
        sent.setdefault(way, []).append(len(views)) or apply(self, code, weights, views, *a)))
    stored = {}
    for way in ("late", "early"):
        engine = _engine(tmp_path / way, _cfg(tiny_model, spread_harness))
        if way == "early":
            engine.generator = Reporting(engine.generator)
            assert not engine.asks_harness_early()  # on the CPU the early requests would cost, not hide
            engine.asks_harness_early = lambda: True  # as on a GPU
        calls = []
        evaluate = engine.env.evaluate
        engine.env.evaluate = lambda task, completion, calls=calls, evaluate=evaluate: (
            calls.append(1) or evaluate(task, completion))
        for step in (1, 2):
            engine.train_step(step, StepProgress(2, quiet=True).start(step))
        assert len(calls) == 8, "each rollout is judged once, early or late"
        stored[way] = [{k: v for k, v in r.items() if k not in ("gen_ms", "eval_ms", "created_at")}
                       for r in engine.store.rows("SELECT * FROM rollouts ORDER BY id")]
    assert judged, "no row was judged early"
    assert stored["early"] == stored["late"] and len(stored["late"]) == 8
    # the harness scored the early half while the rest "decoded", and the batch's request only the rest
    assert sent["late"] == [4, 4] and sent["early"] == [2, 2, 2, 2], sent


def test_answers_asked_early_are_the_batch_s_own_and_a_failed_one_is_asked_again():
    """`apply_harness(known=...)` sends only the rollouts not answered yet, and gives the same
    results as one request for the batch; an early request that failed is dropped (`answered`),
    so the batch's request meets the failure itself."""
    from concurrent.futures import Future

    from backend.harness.client import shared_worker
    from backend.harness.loader import load_default
    from backend.harness.semantics import apply_harness
    from backend.rollout import answered
    from backend.types import Rollout

    harness = load_default("math")
    batch = [Rollout(group=(g,), question="2+2?", answer="4", prompt="2+2?", completion=c, finish="stop",
                     completion_tokens=3, max_new_tokens=16, obs={}, turns=[], domain="math", meta={}, task_id=f"t{g}")
             for g in range(2) for c in ("The answer is 4.", "I think 5", "\\boxed{4}")]
    worker = shared_worker()
    whole = apply_harness(harness, batch, worker)
    first = worker.apply(harness.code, harness.spec.weights, [r.view() for r in batch[:4]])
    sent = []
    apply = worker.apply
    worker.apply = lambda code, weights, views, *a: sent.append(len(views)) or apply(code, weights, views, *a)
    try:
        merged = apply_harness(harness, batch, worker, known=first + [None, None])
    finally:
        del worker.apply
    assert sent == [2]
    assert [(o.reward, o.labels, o.advantage, o.kept) for o in merged.rollouts] == \
        [(o.reward, o.labels, o.advantage, o.kept) for o in whole.rollouts]

    class Item:
        def __init__(self, asked):
            self.asked = asked
    done, failed = Future(), Future()
    done.set_result(first[:2])
    failed.set_exception(RuntimeError("harness worker died"))
    assert answered([Item(None), Item(None)]) is None
    assert answered([Item((done, 1)), Item(None)]) == [first[1], None]
    assert answered([Item((done, 0)), Item((failed, 0))]) is None


def test_after_a_failed_early_request_the_other_chunks_are_not_sent(monkeypatch):
    """A harness over its time limit would meet it once a chunk; `asking` sends no chunk after a
    failed one, and `answered` leaves the whole batch to its own request."""
    from concurrent.futures import ThreadPoolExecutor

    from backend.harness.check import HarnessError
    from backend.harness.loader import load_default
    from backend.rollout import EarlyScoringSkipped, answered, asking
    from benchmarks.score_overlap import batch

    calls = []

    class Failing:
        def apply(self, code, weights, views, *a):
            calls.append(len(views))
            raise HarnessError("harness ran over its 5s limit")

    harness = load_default("math")
    monkeypatch.setattr("backend.harness.client.shared_worker", lambda: Failing())
    items = batch(3, 2)
    with ThreadPoolExecutor(1) as pool:
        ask = asking(harness, 64, pool)
        answers = [ask(items[k:k + 2]) for k in (0, 2, 4)]
    assert calls == [2]
    assert isinstance(answers[0].exception(), HarnessError)
    assert all(isinstance(a.exception(), EarlyScoringSkipped) for a in answers[1:])
    for k, s in enumerate(items):
        s.asked = (answers[k // 2], k % 2)
    assert answered(items) is None
