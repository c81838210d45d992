"""One harness semantics: dead groups, filters and advantages in one place, and
replay reproducing what training stored."""

import pytest

from backend.harness.loader import load_default
from backend.harness.namespace import VIEW_FIELDS
from backend.harness.semantics import (DEAD_TOL, RolloutOut, advantages, filter_and_advantage, group_batch,
                                       is_dead, rollout_from_row, stored_groups)
from backend.store import dumps
from backend.types import Rollout


def _outs(rewards, labels=None):
    return [RolloutOut(r, {}, {}, [(lbl, "")] if lbl else []) for r, lbl in zip(rewards, labels or [None] * 99)]


@pytest.mark.parametrize("value,n", [(0.1, 8), (0.1, 3), (0.3, 6), (1.1, 4), (1e6 / 3, 5)])
def test_equal_nonzero_rewards_are_dead_with_exactly_zero_advantage(value, n):
    # summing 0.1 eight times is not 0.8 exactly: the old rule gave advantages of ~1e-11
    assert is_dead([value] * n)
    assert advantages([value] * n, "group_std") == [0.0] * n
    outs = _outs([value] * n)
    groups = filter_and_advantage([(0,)] * n, outs, ["stop"] * n, load_default("math").spec)
    assert [(g.key, g.dead) for g in groups] == [((0,), True)] and not any(o.trained for o in outs)


def test_dead_means_within_tolerance():
    assert is_dead([1.0, 1.0 + DEAD_TOL / 2]) and not is_dead([1.0, 1.0 + 2 * DEAD_TOL])
    assert not is_dead([0.5])  # a group of one has no peers


def test_std_conventions():
    pop, sample = advantages([1, 0], "group_std", 0.0), advantages([1, 0], "group_std", 0.0, std="sample")
    assert pop == [1.0, -1.0]
    assert sample[0] == pytest.approx(2 ** -0.5)  # TRL's torch.std is Bessel-corrected


def test_filters_and_kept_groups_agree():
    spec = load_default("math").spec
    outs = _outs([0.0, 0.0, 1.1, 0.0, 1.0, 0.0], [None, None, None, None, "answer_copied_from_prompt", None])
    groups = [(0,), (0,), (1,), (1,), (2,), (2,)]
    batch_groups = filter_and_advantage(groups, outs, ["stop", "stop", "stop", "stop", "stop", "length"], spec)
    assert [g.key for g in batch_groups if g.dead] == [(0,)]
    assert [g.members for g in batch_groups] == [(0, 1), (2, 3), (4, 5)]
    assert [o.trained for o in outs] == [False, False, True, True, True, True]
    drop = spec.__class__(**{**spec.__dict__, "filters": {"drop_dead_groups": True, "drop_truncated": True,
                                                          "drop_invalid": True}})
    outs2 = _outs([0.0, 0.0, 1.1, 0.0, 1.0, 0.0], [None, None, None, None, "answer_copied_from_prompt", None])
    filter_and_advantage(groups, outs2, ["stop", "stop", "stop", "stop", "stop", "length"], drop)
    # group 2 loses one rollout to each filter: a group of one has no advantage
    assert [o.kept for o in outs2] == [False, False, True, True, False, False]


def test_groups_in_order_of_first_appearance_and_stored_rows_group_by_step_and_index():
    groups = group_batch([(1,), (0,), (1,), (0,)], [0.5, 1.0, 0.5, 0.0])
    assert [(g.key, g.members, g.dead, g.size) for g in groups] == [((1,), (0, 2), True, 2),
                                                                    ((0,), (1, 3), False, 2)]
    rows = [{"step": 3, "group_idx": 0, "reward": 1.0}, {"step": 3, "group_idx": 0, "reward": None},
            {"step": 4, "group_idx": 0, "reward": 0.0}, {"step": 4, "group_idx": 0, "reward": 0.0}]
    assert [(g.key, g.dead) for g in stored_groups(rows)] == [((3, 0), False), ((4, 0), True)]


def test_a_stored_row_becomes_the_view_training_sent_to_the_worker():
    task = {"question": "What is 2 + 3?", "answer": "5", "meta": {"dataset": "chain_sum"}}
    row = {"step": 7, "group_idx": 2, "prompt": "p", "completion": "<answer>5</answer>", "finish": "stop",
           "completion_tokens": 4, "domain": "math", "task_id": "t:1", "task_json": dumps(task),
           "obs_json": dumps({"_max_new_tokens": 64, "_turns": [{"role": "tool"}], "hits": 1})}
    r = rollout_from_row(row)
    assert r.group == (7, 2)
    # the worker protocol's view: exactly the documented fields, with the engine's bookkeeping
    # (the group, the stored _max_new_tokens and _turns) moved out of obs
    assert tuple(r.view()) == VIEW_FIELDS
    assert r.view() == {"question": "What is 2 + 3?", "answer": "5", "prompt": "p", "completion": "<answer>5</answer>",
                        "finish": "stop", "completion_tokens": 4, "max_new_tokens": 64, "obs": {"hits": 1},
                        "turns": [{"role": "tool"}], "domain": "math", "meta": {"dataset": "chain_sum"},
                        "task_id": "t:1"}
    assert isinstance(r, Rollout)
