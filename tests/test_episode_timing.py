"""Episode domains (SWE) in the loop: the env's own time between generation calls (tools, edits,
hidden tests) is scoring, as a single-turn domain's tests are, not generation; and the batch
shapes a multi-turn episode run decodes are freed after it, one-shot edits keep theirs."""

from __future__ import annotations

from contextlib import contextmanager

from backend.harness.loader import default_harness_path
from dead_group_runs import engine


def test_an_episode_envs_own_time_is_scoring_not_generation(tmp_path, tiny_model):
    import random
    import time

    expert = str(default_harness_path("swe_expert"))
    eng = engine(tmp_path / "swe", tiny_model, expert, ["domain=swe", "swe.levels='0'"])
    try:
        tasks = eng.env.sample_tasks(2, random.Random(0), {"level": 0})
        run_episodes = eng.env.run_episodes

        def slow_env(*args, **kwargs):  # the env's tools and tests: 500 ms outside any generation
            time.sleep(0.5)
            return run_episodes(*args, **kwargs)
        eng.env.run_episodes = slow_env
        t0 = time.perf_counter()
        _, times = eng.collect(tasks, eng.harness, 2)
        wall = (time.perf_counter() - t0) * 1000
    finally:
        eng.store.close()
    assert times["score_ms"] >= 500 and times["gen_ms"] <= wall - 500


class ShapeLedger:
    """The engine's generator, with `scratch_shapes` blocks counted."""

    def __init__(self, generator) -> None:
        self.inner, self.blocks = generator, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @contextmanager
    def scratch_shapes(self):
        self.blocks += 1
        yield


def test_multi_turn_episodes_free_their_batch_shapes(tmp_path, tiny_model):
    import random

    expert = str(default_harness_path("swe_expert"))
    eng = engine(tmp_path / "swe", tiny_model, expert, ["domain=swe", "swe.levels='0,2'", "swe.max_turns=2"])
    try:
        eng.generator = ledger = ShapeLedger(eng.generator)
        one_shot = eng.env.sample_tasks(2, random.Random(0), {"level": 0})
        multi = eng.env.sample_tasks(2, random.Random(0), {"level": 2})
        assert not eng.env.takes_turns(one_shot) and eng.env.takes_turns(multi + one_shot)
        eng.collect(one_shot, eng.harness, 2)
        assert ledger.blocks == 0  # one-shot edits: the step's one shape stays for the next step
        eng.collect(multi, eng.harness, 2)
        assert ledger.blocks == 1
    finally:
        eng.store.close()


def test_an_episode_turn_keeps_the_token_budget_it_is_given(tmp_path, tiny_model):
    """A one-shot SWE answer gets the held-out evaluation's `eval.max_new_tokens` and, in
    training, the harness's under `train.max_new_tokens_cap`, as a single-turn domain's does."""
    import random

    expert = str(default_harness_path("swe_expert"))
    eng = engine(tmp_path / "swe", tiny_model, expert, ["domain=swe", "swe.levels='0'",
                                                       "train.max_new_tokens_cap=6"])
    try:
        tasks = eng.env.sample_tasks(2, random.Random(0), {"level": 0})
        held_out, _ = eng.collect(tasks, eng.harness, 1, greedy=True, max_new_tokens=3)
        trained, _ = eng.collect(tasks, eng.harness, 2)
    finally:
        eng.store.close()
    assert max(len(s.completion_ids) for s in held_out) <= 3 + 2  # the closing tokens of the turn
    assert max(len(s.completion_ids) for s in trained) <= 6 + 2
    assert max(s.turns[0]["tokens"] for s in held_out) <= 3 and max(s.turns[0]["tokens"] for s in trained) <= 6


def test_multi_turn_episodes_reuse_their_cache_across_turns(tmp_path, tiny_model):
    """`model.kv_reuse` on the fast engine: from an episode's second turn on, the tokens of its
    earlier turns come from the cache (the engine's own equivalence tests: tests/test_kvreuse.py);
    an engine without a cross-call cache says so and runs without it."""
    import random

    expert = str(default_harness_path("swe_expert"))
    eng = engine(tmp_path / "swe", tiny_model, expert, ["domain=swe", "swe.levels='2'", "swe.max_turns=3",
                                                       "train.max_new_tokens_cap=24",
                                                       "model.engine=fast", "model.kv_reuse=true"])
    try:
        calls = []
        generate = eng.generator.generate

        def counted(prompts, *args, **kwargs):
            out = generate(prompts, *args, **kwargs)
            calls.append((len(prompts), eng.generator.reused_tokens))
            return out
        eng.generator.generate = counted
        eng.collect(eng.env.sample_tasks(2, random.Random(0), {"level": 2}), eng.harness, 2)
    finally:
        eng.store.close()
    assert len(calls) >= 2 and calls[0][1] == 0 and all(reused > 0 for _, reused in calls[1:]), calls
    hf = engine(tmp_path / "hf", tiny_model, expert, ["domain=swe", "model.engine=hf", "model.kv_reuse=true"])
    try:
        assert any("keeps no cache across calls" in r["message"] for r in hf.store.rows("SELECT * FROM events"))
    finally:
        hf.store.close()


def test_the_engine_frees_its_cache_for_training_when_asked(tmp_path, tiny_model):
    """`model.free_cache_for_training`: the update finds the generation engine's KV caches freed
    (it plans from the run's whole share); without it they stay for the next generation."""
    import random

    from backend.rollout import is_trained

    for free in (False, True):
        eng = engine(tmp_path / f"free-{free}", tiny_model, str(default_harness_path("math")),
                     ["model.engine=fast", f"model.free_cache_for_training={str(free).lower()}"])
        try:
            items, _ = eng.collect(eng.env.sample_tasks(2, random.Random(0), {}), eng.harness, 2)
            assert eng.generator._ws  # the step's batch shape, kept after generating
            for k, s in enumerate(items):  # make every rollout trainable
                s.kept, s.advantage = True, 1.0 if k % 2 else -1.0
            assert all(is_trained(s.kept, s.advantage) for s in items)
            eng.update_policy(items)
            assert bool(eng.generator._ws) is not free
        finally:
            eng.store.close()


def test_a_held_out_batch_that_failed_to_generate_stops_the_run_not_the_accuracy(tmp_path, tiny_model):
    """Recorded, a held-out pass whose every answer failed to generate would read as accuracy 0 and
    roll back the last promotion; the run stops with the cause instead, and records no evaluation."""
    import pytest

    from backend.loop import GenerationFailed

    eng = engine(tmp_path / "swe", tiny_model, str(default_harness_path("swe_expert")),
                 ["domain=swe", "swe.levels='0'", "train.max_new_tokens_cap=24"])
    try:
        def broken(*_a, **_k):
            raise ValueError("a kernel the card cannot run")
        eng.generator.generate = broken
        with pytest.raises(GenerationFailed, match="held-out evaluation at the start: all .*kernel the card"):
            eng.evaluate(0)
        assert eng.store.rows("SELECT * FROM evals") == []
    finally:
        eng.store.close()
