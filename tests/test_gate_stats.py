"""The gate's statistics: paired tests, the decision rule on planted effects, power and sample size.

The synthetic generator plays a probe: `n` prompts of mixed difficulty, `k`
rollouts per prompt and arm, the candidate's chance of a right answer shifted
by a planted effect. The arms share half their random numbers (common random
numbers, as a paired probe does), so a no-effect candidate is not a copy of
the incumbent.
"""

import random

import pytest

from backend.evolve.stats import (decide, paired_binary, paired_bootstrap, power, probe_plan, sample_size,
                                  sign_test, wilson_interval)

SEEDS = range(40)
MIN_GAIN = 0.02


def probe(seed: int, effect: float, n: int = 64, k: int = 4) -> tuple[list[float], list[float]]:
    """Per-prompt accuracy of incumbent and candidate: the same prompts, partly the same draws."""
    rng = random.Random(seed)
    old, new = [], []
    for _ in range(n):
        p = rng.uniform(0.05, 0.95)
        a = b = 0
        for _ in range(k):
            u = rng.random()
            v = u if rng.random() < 0.5 else rng.random()
            a += u < p
            b += v < min(1.0, max(0.0, p + effect))
        old.append(a / k)
        new.append(b / k)
    return old, new


def binary(seed: int, effect: float, n: int, base: float = 0.5) -> tuple[list[bool], list[bool]]:
    """One outcome per problem and arm, drawn independently (the power formula's assumption)."""
    rng = random.Random(seed)
    return [rng.random() < base for _ in range(n)], [rng.random() < base + effect for _ in range(n)]


def statuses(effect: float, test: str) -> list[str]:
    out = []
    for seed in SEEDS:
        if test == "bootstrap":
            a, b = probe(seed, effect)
            e = paired_bootstrap(a, b, seed=seed, metric="accuracy", n_boot=1000, rollouts=4)
        else:
            a, b = binary(seed, effect, 128)
            e = paired_binary(a, b)
        out.append(decide(e, MIN_GAIN, harm=e).status)
    return out


@pytest.mark.parametrize("test", ["bootstrap", "binary"])
def test_a_planted_no_effect_candidate_almost_never_passes(test):
    got = statuses(0.0, test)
    assert got.count("passed") / len(got) <= 0.05, got
    assert got.count("inconclusive") >= 0.9 * len(got)  # not failed either: there is no harm


@pytest.mark.parametrize("test", ["bootstrap", "binary"])
def test_a_planted_large_effect_passes(test):
    got = statuses(0.25, test)
    assert got.count("passed") / len(got) >= 0.9, got


def test_a_planted_harm_fails():
    got = statuses(-0.25, "bootstrap")
    assert got.count("failed") / len(got) >= 0.9 and "passed" not in got


def test_exact_mcnemar_and_interval():
    # 10 problems only the candidate solves, 2 only the incumbent: p = P(X <= 2 | 12, 1/2) * 2
    a = [False] * 10 + [True] * 2 + [True] * 20 + [False] * 8
    b = [True] * 10 + [False] * 2 + [True] * 20 + [False] * 8
    e = paired_binary(a, b)
    assert e.detail == {"both": 20, "only_new": 10, "only_old": 2, "neither": 8}
    assert e.effect == pytest.approx(8 / 40)
    assert e.p_value == pytest.approx(2 * (1 + 12 + 66) / 2 ** 12)
    assert e.ci_low < e.effect < e.ci_high and e.ci_low > 0
    assert sign_test(0, 0) == 1.0 and sign_test(3, 6) == 1.0
    same = paired_binary([True, False] * 20, [True, False] * 20)  # identical arms: tight, centred on zero
    assert same.effect == 0 and same.p_value == 1.0 and -0.05 < same.ci_low <= 0 <= same.ci_high < 0.05
    with pytest.raises(ValueError):
        paired_binary([True], [True, False])


def test_wilson_interval_of_one_accuracy():
    # 146 of 500 and 0 of 32 by hand: centre (p + z^2/2n) / (1 + z^2/n); 0 of n tops out at z^2 / (n + z^2)
    assert wilson_interval(146, 500) == pytest.approx((0.2539, 0.3333), abs=1e-4)
    assert wilson_interval(0, 32) == pytest.approx((0.0, 1.96 ** 2 / (32 + 1.96 ** 2)), abs=1e-4)
    assert wilson_interval(32, 32)[1] == 1.0 and wilson_interval(0, 0) == (0.0, 1.0)


def test_bootstrap_is_seeded_and_paired():
    a, b = probe(7, 0.1)
    assert paired_bootstrap(a, b, seed=3) == paired_bootstrap(a, b, seed=3)
    # Pairing: a large shared prompt effect cancels in the difference
    base = [i / 10 for i in range(10)] * 6
    e = paired_bootstrap(base, [x + 0.05 for x in base], seed=0)
    assert e.effect == pytest.approx(0.05) and e.ci_low == pytest.approx(0.05) and e.p_value < 0.01


def test_decision_rule_cases():
    gain = paired_binary([False] * 30 + [True] * 34, [True] * 30 + [True] * 34)
    small = paired_binary([False] * 2 + [True] * 62, [True] * 2 + [True] * 62)
    harm = paired_binary([True] * 30 + [True] * 34, [False] * 30 + [True] * 34)
    assert decide(gain, MIN_GAIN).status == "passed"
    assert decide(small, MIN_GAIN).status == "inconclusive"
    d = decide(gain, MIN_GAIN, harm=harm)
    assert d.status == "failed" and d.reason.startswith("significant harm")
    assert decide(harm, MIN_GAIN).status == "failed"  # the targeted metric itself fell significantly
    assert decide(gain, MIN_GAIN, failure="blocked by validity diagnostic copied").status == "failed"
    assert decide(paired_binary([], []), MIN_GAIN).status == "failed"
    row = decide(small, MIN_GAIN).row()
    assert set(row) == {"metric", "effect", "ci_low", "ci_high", "p_value", "n", "underpowered"} and row["n"] == 64


def test_underpowered_flag():
    a, b = probe(1, 0.0, n=4, k=2)  # a CPU-sized probe: 4 prompts x 2 rollouts
    d = decide(paired_bootstrap(a, b, seed=1), MIN_GAIN, min_effect=0.1)
    assert d.underpowered and "underpowered" in d.reason and d.mde > 0.1
    a, b = probe(1, 0.0, n=400, k=8)
    assert not decide(paired_bootstrap(a, b, seed=1, n_boot=500), MIN_GAIN, min_effect=0.1).underpowered


def test_power_and_sample_size():
    n = sample_size(0.15, base=0.5, min_gain=MIN_GAIN)
    assert power(n, 0.15, 0.5, MIN_GAIN) >= 0.8 > power(n - 5, 0.15, 0.5, MIN_GAIN)
    assert sample_size(0.2, 0.5, MIN_GAIN) < n < sample_size(0.1, 0.5, MIN_GAIN)  # larger effects need fewer
    assert sample_size(0.15, 0.5, MIN_GAIN, rollouts=8) < n  # more rollouts per prompt need fewer prompts
    assert sample_size(0.15, 0.05, MIN_GAIN) < n  # rare successes vary less
    with pytest.raises(ValueError):
        sample_size(0.01, min_gain=MIN_GAIN)
    # The formula's promise, checked by simulation: at n, about 80% of planted effects pass.
    passed = sum(decide(paired_binary(*binary(s, 0.15, n)), MIN_GAIN).status == "passed" for s in range(200))
    assert 0.7 <= passed / 200 <= 0.92, (n, passed)


def test_probe_plan_cuda_large_cpu_small():
    gpu = probe_plan(0.1, MIN_GAIN, rollouts=8, cpu_tasks=2, max_tasks=128, cuda=True)
    assert gpu.tasks == gpu.required == 76 and gpu.power >= 0.8 and not gpu.underpowered
    assert gpu.tasks * gpu.rollouts >= 500  # hundreds of rollouts a side
    cpu = probe_plan(0.1, MIN_GAIN, rollouts=4, cpu_tasks=2, max_tasks=128, cuda=False)
    assert cpu.tasks == 2 and cpu.underpowered and cpu.power < 0.2
    capped = probe_plan(0.05, MIN_GAIN, rollouts=8, cpu_tasks=2, max_tasks=128, cuda=True)
    assert capped.tasks == 128 and capped.underpowered
