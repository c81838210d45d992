"""The pure parts of the `trainer`, `step` and `card` bench sections: the card's rate and its
interval, the step variants' syntax, the trainer section's rollouts. (The sections themselves run
models and processes: `evotui bench --quick -- --only trainer,step,card`.)"""

from __future__ import annotations

import pytest

from backend.tools import bench_card, bench_trainer
from backend.tools.bench import step_variants


def test_card_rate_is_rollouts_over_time_between_first_and_last_step_seen():
    r = bench_card.Progress(seen=[(10.0, 512), (12.0, 1024), (15.0, 1536), (17.0, 2048)])
    got = bench_card._rate(r)
    assert got["steps"] == 3
    assert got["rate"] == pytest.approx(1536 / 7)
    assert got["var"] > 0
    even = bench_card._rate(bench_card.Progress(seen=[(0.0, 0), (2.0, 100), (4.0, 200), (6.0, 300)]))
    assert even["rate"] == pytest.approx(50) and even["var"] == pytest.approx(0)
    assert bench_card._rate(bench_card.Progress(seen=[(1.0, 5)]))["rate"] is None


def test_card_total_sums_runs_and_needs_every_run():
    res = {"rates": [{"rate": 50.0, "var": 4.0}, {"rate": 30.0, "var": 5.0}]}
    total, half, n = bench_card._total(res)
    assert (total, n) == (80.0, 2) and half == pytest.approx(1.96 * 3.0)
    res["rates"].append({"rate": None, "var": None})
    assert bench_card._total(res)[0] is None


def test_step_variants_syntax():
    assert step_variants("buckets:train.length_buckets=true; both:train.length_buckets=true,train.compile=true") == [
        ("buckets", ("train.length_buckets=true",)),
        ("both", ("train.length_buckets=true", "train.compile=true"))]
    assert step_variants("") == []


def test_trainer_rollouts_are_groups_of_one_prompt_within_the_lengths():
    rows = bench_trainer.rollouts(20, 8, 32, vocab=100)
    assert len(rows) == 20
    assert all(80 <= len(r.prompt_ids) <= 130 and 4 <= len(r.completion_ids) <= 32 for r in rows)
    assert rows[0].prompt_ids == rows[7].prompt_ids != rows[8].prompt_ids
    assert all(r.advantage != 0 and len(r.mask) == len(r.completion_ids) for r in rows)
