"""The curriculum rule (backend/curriculum_rule.py): the level follows the groups' pass rate
toward the harness's target, the mix follows mixed groups, and both are derived from the
stored steps, so a resumed run plans exactly what an uninterrupted one did."""

from __future__ import annotations

import json

import pytest

from backend import curriculum_rule as cr
from backend.envs.math import LEVELS, MathEnv

CUR = {"level": 2, "target_pass_rate": 0.5}


def rec(level: int, groups: int, passed: float, mixed: int = 0, dataset: str = "gcd", **kw) -> dict:
    return {"level": level, "base": kw.get("base", 2), "target": kw.get("target", 0.5),
            "tally": {dataset: [groups, mixed, passed]}, "unlevelled": kw.get("unlevelled", [])}


def level(history, cur=CUR, levels=(0, 3)) -> int:
    return cr.plan(cur, levels, history, None)[0]["level"]


def test_the_level_moves_toward_the_target_band_after_a_window_at_it():
    assert level([]) == 2  # the first step: the harness's level
    assert level([rec(2, 8, 0.0)]) == 2  # one step at the level is not enough
    assert level([rec(2, 8, 0.0)] * 2) == 1  # pass rate 0 < 0.4: down
    assert level([rec(2, 8, 8.0)] * 2) == 3  # 1.0 > 0.6: up
    assert level([rec(2, 8, 4.4)] * 2) == 2  # 0.55 inside the band: stay
    assert level([rec(2, 8, 0.0), rec(1, 8, 0.0)]) == 1  # just moved: wait a window at the new level
    assert level([rec(0, 8, 0.0)] * 2) == 0 and level([rec(3, 8, 8.0)] * 2) == 3  # within the env's levels
    assert level([rec(2, 0, 0.0)] * 2) == 2  # no groups seen: no evidence, no move


def test_a_new_base_or_target_starts_again_and_unlevelled_datasets_do_not_count():
    assert level([rec(0, 8, 0.0, base=1)] * 2) == 2  # the harness changed its level: start from it
    assert level([rec(0, 8, 0.0, target=0.2)] * 2) == 2
    assert level([rec(2, 8, 0.0, unlevelled=["gcd"])] * 2) == 2


def test_the_mix_follows_mixed_groups_and_never_drops_a_dataset():
    hist = [{"level": 2, "base": 2, "target": 0.5, "tally": {"gcd": [4, 4, 2.0], "lcm": [4, 0, 0.0]}}] * 2
    cur, record = cr.plan({**CUR, "datasets": {"gcd": 1.0, "lcm": 2.0}}, (0, 3), hist, ["gcd", "lcm"])
    assert cur["datasets"] == record["datasets"] == {"gcd": 1.1, "lcm": 0.2}
    cur, _ = cr.plan(CUR, (0, 3), [], ["gcd", "lcm"])  # nothing seen, no weights named: uniform
    assert cur["datasets"] == {"gcd": 0.6, "lcm": 0.6}


def test_a_fixed_level_reads_and_records_nothing():
    class NoStore:
        def window_steps(self, lo, hi):
            raise AssertionError("a fixed level read the store")
    cur = {"level": 1, "datasets": {"gcd": 1.0}}
    assert cr.for_step(NoStore(), MathEnv(["gcd"]), cur, 5) == (cur, None)
    assert cr.for_step(NoStore(), MathEnv(["gcd"]), {**cur, "target_pass_rate": 0.0}, 5)[1] is None


def test_math_has_levels_a_small_model_can_start_from():
    beyond = set(LEVELS) - {"basic_arithmetic", "chain_sum"}
    assert len(beyond) >= 6 and all(len(LEVELS[d]) == 4 for d in LEVELS)
    env = MathEnv(sorted(beyond))
    assert env.curriculum_levels() == (0, 3)
    for d in sorted(beyond):  # every level builds, and each task is judged right by its own answer
        for lv in range(4):
            t = env._make(d, lv, 5, 1)[0]
            assert env.evaluate(t, env.reference_solution(t)).correct, (d, lv, t.answer)


@pytest.mark.slow
def test_the_level_is_recomputed_identically_after_a_resume(tmp_path, tiny_model):
    """The tiny model never answers right: pass rate 0 < target - band, so the level steps down
    from 1 to 0 after two steps. A run stopped after step 2 and resumed plans the same."""
    from dead_group_runs import engine, fingerprint, train
    from backend.harness.loader import default_harness_path

    code = default_harness_path("math").read_text()
    old = '"level": 1}'
    assert old in code
    harness = tmp_path / "target.py"
    harness.write_text(code.replace(old, '"level": 1, "target_pass_rate": 0.3}'))

    whole = engine(tmp_path / "whole", tiny_model, str(harness))
    train(whole, [1, 2, 3])
    first = engine(tmp_path / "resumed", tiny_model, str(harness))
    train(first, [1, 2])
    del first
    resumed = engine(tmp_path / "resumed", tiny_model, str(harness))
    train(resumed, [3])

    def plans(eng):
        return [json.loads(r["metrics_json"])[cr.KEY] for r in eng.store.window_steps(1, 3)]
    assert [p["level"] for p in plans(whole)] == [1, 1, 0]
    assert plans(resumed) == plans(whole)
    assert fingerprint(resumed) == fingerprint(whole)
    drawn = whole.store.rows("SELECT task_json FROM rollouts WHERE step = 3")
    assert {json.loads(r["task_json"])["meta"]["level"] for r in drawn} == {0}  # step 3 drew level-0 tasks
