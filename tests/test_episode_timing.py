"""A step's split for episode domains (SWE): the env's own time between generation calls (tools,
edits, hidden tests) is scoring, as a single-turn domain's tests are, not generation."""

from __future__ import annotations

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
