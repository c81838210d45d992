"""The pure parts of the `trainer`, `step` and `card` bench sections: the card's rate and its
interval, the step variants' syntax, the trainer section's rollouts. (The sections themselves run
models and processes: `evotui bench --quick -- --only trainer,step,card`.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.tools import bench_card, bench_trainer
from backend.tools.bench import step_variants


def _progress(*seen):
    """A run seen at (time, step) with 512 rollouts and 100 * step completion tokens a step."""
    return bench_card.Progress(seen=[(t, k, 512 * k, 50 * k * (k + 1)) for t, k in seen])


def test_card_rate_is_rollouts_over_time_between_first_and_last_step_seen():
    got = bench_card._rate(_progress((10.0, 1), (12.0, 2), (15.0, 3), (17.0, 4)))
    assert got["steps"] == 3
    assert got["rate"] == pytest.approx(1536 / 7)
    assert got["var"] > 0
    assert got["tokens"] == pytest.approx((1000 - 100) / 3)  # steps 2-4: 200 + 300 + 400 tokens
    even = bench_card._rate(_progress((0.0, 1), (2.0, 2), (4.0, 3), (6.0, 4)))
    assert even["rate"] == pytest.approx(256) and even["var"] == pytest.approx(0)
    assert bench_card._rate(_progress((1.0, 5)))["rate"] is None


def test_card_settings_are_timed_over_the_steps_every_run_saw():
    """A fast setting that got further is timed on the slow one's steps only: its later, cheaper
    steps (completions shortened by training) would count other work."""
    slow = {"label": "today", "runs": [_progress((0.0, 2), (4.0, 3), (8.0, 4), (12.0, 5)),
                                       _progress((1.0, 3), (5.0, 4), (9.0, 5), (13.0, 6))]}
    fast = {"label": "new", "runs": [_progress((0.0, 2), (2.0, 3), (4.0, 4), (5.0, 5), (5.5, 6), (5.7, 7))] * 2}
    span = bench_card.common_steps([slow, fast])
    assert span == (3, 5)
    rate = bench_card._rate(fast["runs"][0], span)
    assert rate["steps"] == 2 and rate["rate"] == pytest.approx(1024 / 3)
    assert bench_card._rate(fast["runs"][0])["rate"] == pytest.approx(512 * 5 / 5.7)  # every step: higher
    assert bench_card.common_steps([slow, {"label": "new", "runs": [_progress((0.0, 9), (1.0, 10))]}]) is None


def test_card_total_sums_runs_and_needs_every_run():
    rates = [{"rate": 50.0, "var": 4.0}, {"rate": 30.0, "var": 5.0}]
    total, half, n = bench_card._total(rates)
    assert (total, n) == (80.0, 2) and half == pytest.approx(1.96 * 3.0)
    rates.append({"rate": None, "var": None})
    assert bench_card._total(rates)[0] is None


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


def test_the_card_ratio_comes_with_an_interval_from_both_rates():
    """A measured card row: 1,831.0 +- 190.8 against 1,140.3 +- 155.2 rollouts/s."""
    low, high = bench_card.ratio_interval(1140.3, 155.2, 1831.0, 190.8)
    assert (round(low, 2), round(high, 2)) == (1.35, 1.91)
    assert low < 1831.0 / 1140.3 < high
    narrow = bench_card.ratio_interval(1140.3, 15.5, 1831.0, 19.1)
    assert low < narrow[0] < narrow[1] < high  # tighter rates, tighter ratio
    assert bench_card.ratio_text(1140.3, 155.2, 1831.0, 190.8) == "1.61x [1.35, 1.91]"
    assert bench_card.ratio_text(1140.3, None, 1831.0, 190.8) == "1.61x"
    assert bench_card.ratio_text(None, None, 1831.0, 190.8) == ""


def test_pooled_card_ratio_narrows_with_lanes_and_refuses_a_lane_without_rates(tmp_path):
    def lane(today, new, var=400.0):
        return {"today": {"rates": [{"rate": today, "var": var}] * 6},
                "new": {"rates": [{"rate": new, "var": var}] * 6}}

    one = bench_card.pooled_ratio([lane(200.0, 320.0)])
    low, high = bench_card.ratio_interval(1200.0, 1.96 * (6 * 400.0) ** 0.5, 1920.0, 1.96 * (6 * 400.0) ** 0.5)
    assert abs(one["ratio"] - 1.6) < 1e-9 and abs(one["ci"][0] - low) < 1e-9 and abs(one["ci"][1] - high) < 1e-9
    three = bench_card.pooled_ratio([lane(200.0, 320.0), lane(210.0, 320.0), lane(190.0, 320.0)])
    assert three["ci"][1] - three["ci"][0] < one["ci"][1] - one["ci"][0]
    assert min(three["each"]) < three["ratio"] < max(three["each"])
    with pytest.raises(ValueError):
        bench_card.pooled_ratio([{"today": {"rates": [{"rate": None, "var": None}]}, "new": lane(1, 2)["new"]}])

    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"section": "card", "ratio": "1.60x", "baseline": "b", "ours": "o",
                                 "data": lane(200.0, 320.0)}]))
    out = subprocess.run([sys.executable, "benchmarks/card_pool.py", str(rows), str(rows)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0 and "pooled over 2 lanes: 1.60x" in out.stdout
    bad = subprocess.run([sys.executable, "benchmarks/card_pool.py", str(tmp_path / "missing.json")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert bad.returncode == 1 and "cannot read card rows" in bad.stderr
