"""The report's held-out section: rises, twin contrasts, levels and the ood set, paired over
(seed, problem), on real run stores with planted per-problem outcomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_run import build_run, outcomes

from backend.config import RunConfig
from backend.evolve.stats import paired_binary, wilson_interval
from backend.tools.report import collect_run, write_report
from backend.tools.report_heldout import by_level, heldout_lines, ood, rise, twin_contrasts

N = 40
SEEDS = (0, 1)


def _level(i: int) -> int:
    return 1 if i < N // 2 else 2


def _results(correct: list[bool], split: str, levels: bool) -> list[dict]:
    return [{"task_id": f"{split}:{i}", "correct": c, "status": "correct" if c else "wrong", "reward": float(c),
             **({"level": _level(i)} if levels else {})} for i, c in enumerate(correct)]


def _run(root: Path, arm: str, seed: int, test: list[list[bool]], ood_sets: list[list[bool]] | None = None,
         levels: bool = False, finished: bool = True) -> Path:
    """A one-step run of `arm` with a test (and ood) evaluation per entry of `test`, steps 0, 1, ..."""
    d = root / f"{arm}-s{seed}"
    store = build_run(d / "run.db", steps=1, seed=seed, cfg=RunConfig(name=arm, seed=seed), groups=2, group_size=2)
    for step, correct in enumerate(test):
        results = {"validation": _results(correct, "validation", levels), "test": _results(correct, "test", levels)}
        if ood_sets:
            results["ood"] = _results(ood_sets[step], "ood", False)
        store.record_evals(step, results, {}, None, store.run()["harness_version"])
    store.set_run(status="finished" if finished else "stopped")
    store.close()
    return d


def _flipped(n: int, right: int) -> list[bool]:
    """`right` of `n` correct: the last ones (disjoint from `outcomes(n, right)` when 2 * right <= n)."""
    return [i >= n - right for i in range(n)]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("heldout")
    out = []
    for seed in SEEDS:
        # static-expert: 10 right at step 0, a superset of 30 at the end: a rise that excludes 0
        out.append(_run(root, "static-expert", seed, [outcomes(N, 10), outcomes(N, 30)],
                        ood_sets=[outcomes(20, 5), outcomes(20, 15)], levels=True))
        # static: as many right at the end as at the start, on other problems: a tie
        out.append(_run(root, "static", seed, [outcomes(N, 20), _flipped(N, 20)]))
    out.append(_run(root, "static-expert", 2, [outcomes(N, 0), outcomes(N, N)], finished=False))
    return out


@pytest.fixture(scope="module")
def arms(dirs) -> dict[str, list[dict]]:
    got: dict[str, list[dict]] = {}
    for d in dirs:
        r = collect_run(d)
        if r["complete"]:
            got.setdefault(r["arm"], []).append(r)
    return got


def test_a_rise_over_the_run_excludes_zero(arms):
    e = rise(arms["static-expert"])
    assert (e.n, e.detail) == (2 * N, {"both": 20, "only_new": 40, "only_old": 0, "neither": 20})
    assert e.effect == pytest.approx(0.5)
    assert e.ci_low > 0 and e.p_value < 1e-6


def test_a_tie_does_not_exclude_zero(arms):
    e = rise(arms["static"])
    assert (e.n, e.detail["only_new"], e.detail["only_old"]) == (2 * N, 40, 40)
    assert e.effect == 0 and e.ci_low < 0 < e.ci_high and e.p_value == 1.0


def test_a_single_evaluation_has_no_rise(tmp_path):
    r = collect_run(_run(tmp_path, "static", 0, [outcomes(N, 10)]))
    assert rise([r]) is None and ood([r]) is None


def test_twin_contrasts_pair_final_outcomes_by_seed_and_problem(arms):
    diffs = twin_contrasts(arms)
    assert list(diffs) == ["static-expert - static"]  # no coevolve arm ran
    e = diffs["static-expert - static"]
    # static's final right: problems 20-39; static-expert's: 0-29
    want = paired_binary(_flipped(N, 20) * 2, outcomes(N, 30) * 2)
    assert (e.n, e.detail, e.effect) == (2 * N, {"both": 20, "only_new": 40, "only_old": 20, "neither": 0},
                                         want.effect)
    assert (e.ci_low, e.ci_high, e.p_value) == (want.ci_low, want.ci_high, want.p_value)


def test_levels_at_start_and_end(arms):
    rows = by_level(arms["static-expert"])
    assert [x["level"] for x in rows] == [1, 2]
    one, two = rows
    # start: problems 0-9 right (all level 1); end: 0-29 right (level 1 all 20, level 2 ten of 20), two seeds
    assert (one["start"]["k"], one["start"]["n"], one["final"]["k"], one["final"]["n"]) == (20, 40, 40, 40)
    assert (two["start"]["k"], two["start"]["n"], two["final"]["k"], two["final"]["n"]) == (0, 40, 20, 40)
    assert (two["final"]["low"], two["final"]["high"]) == wilson_interval(20, 40)
    assert one["rise"].effect == pytest.approx(0.5) and two["rise"].effect == pytest.approx(0.5)
    assert two["rise"].n == 40 and two["rise"].ci_low > 0
    assert by_level(arms["static"]) == []  # stored without levels


def test_ood_start_final_and_rise(arms):
    o = ood(arms["static-expert"])
    assert (o["start"]["acc"], o["start"]["n"], o["final"]["acc"], o["final"]["n"]) == (0.25, 40, 0.75, 40)
    assert (o["final"]["low"], o["final"]["high"]) == wilson_interval(30, 40)
    assert o["rise"].effect == pytest.approx(0.5) and o["rise"].n == 40 and o["rise"].ci_low > 0
    assert ood(arms["static"]) is None


def test_ood_table_only_when_some_run_has_one(arms):
    with_ood = "\n".join(heldout_lines(arms))
    without = "\n".join(heldout_lines({"static": arms["static"]}))
    assert "Out-of-distribution" in with_ood and "Out-of-distribution" not in without
    assert "by level" in with_ood and "by level" not in without


def test_write_report_counts_only_complete_runs(dirs, tmp_path):
    path, text = write_report(dirs, tmp_path / "r")
    md = path.read_text()
    assert "## Held-out results paired over problems" in md
    assert "| static-expert | 2 | +0.500 |" in md  # the unfinished third seed is not counted
    rows = {r["arm"]: r for r in json.loads((tmp_path / "r" / "report.json").read_text())}
    held = rows["static-expert"]["heldout"]
    assert held["test_rise"]["n"] == 2 * N and held["test_rise"]["ci_low"] > 0
    assert held["vs_static"]["detail"] == {"both": 20, "only_new": 40, "only_old": 20, "neither": 0}
    assert [x["final"]["k"] for x in held["by_level"]] == [40, 20]
    assert held["ood"]["rise"]["n"] == 40
    assert rows["static"]["heldout"]["ood"] is None and rows["static"]["heldout"]["by_level"] == []
    assert "static-expert test rise" in text and "static-expert - static (final test)" in text
    assert "static-expert ood rise" in text

    _, all_text = write_report(dirs, tmp_path / "all", include_incomplete=True)
    rows = {r["arm"]: r for r in json.loads((tmp_path / "all" / "report.json").read_text())}
    assert rows["static-expert"]["heldout"]["test_rise"]["n"] == 3 * N
