"""One harness semantics: dead groups, filters and advantages in one place, and
replay reproducing what training stored."""

import pytest

from backend.harness.loader import load_default
from backend.harness.semantics import (DEAD_TOL, RolloutOut, advantages, filter_and_advantage, is_dead)


def _outs(rewards, labels=None):
    return [RolloutOut(r, {}, {}, [(lbl, "")] if lbl else []) for r, lbl in zip(rewards, labels or [None] * 99)]


@pytest.mark.parametrize("value,n", [(0.1, 8), (0.1, 3), (0.3, 6), (1.1, 4), (1e6 / 3, 5)])
def test_equal_nonzero_rewards_are_dead_with_exactly_zero_advantage(value, n):
    # summing 0.1 eight times is not 0.8 exactly: the old rule gave advantages of ~1e-11
    assert is_dead([value] * n)
    assert advantages([value] * n, "group_std") == [0.0] * n
    outs = _outs([value] * n)
    dead = filter_and_advantage([(0,)] * n, outs, ["stop"] * n, load_default("math").spec)
    assert dead == {(0,)} and not any(o.trained for o in outs)


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
    dead = filter_and_advantage(groups, outs, ["stop", "stop", "stop", "stop", "stop", "length"], spec)
    assert dead == {(0,)}
    assert [o.trained for o in outs] == [False, False, True, True, True, True]
    drop = spec.__class__(**{**spec.__dict__, "filters": {"drop_dead_groups": True, "drop_truncated": True,
                                                          "drop_invalid": True}})
    outs2 = _outs([0.0, 0.0, 1.1, 0.0, 1.0, 0.0], [None, None, None, None, "answer_copied_from_prompt", None])
    filter_and_advantage(groups, outs2, ["stop", "stop", "stop", "stop", "stop", "length"], drop)
    # group 2 loses one rollout to each filter: a group of one has no advantage
    assert [o.kept for o in outs2] == [False, False, True, True, False, False]
