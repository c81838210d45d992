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
