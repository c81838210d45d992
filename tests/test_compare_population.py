"""The compare arms with several runs a seed (population, population-copy, best-of-n): their
configs and processes, their compare.json rows, their report sections and resume, over populations
built with the real stores (tests/population_fixtures.py); one real tiny best-of-n arm."""

from __future__ import annotations

import json

import pytest

from backend.config import load_config, to_dict
from backend.errors import UsageError
from backend.evolve.stats import paired_binary
from backend.population.members import member_seed
from backend.population.store import PopulationStore
from backend.tools import compare
from backend.tools.compare_population import group_config, units
from backend.tools.report import write_report
from backend.tools.report_population import groups_in
from population_fixtures import N_TEST, build_best_of_n, build_population


def _grid(out, seed=0):
    """A compare folder whose three group arms finished: population m1 reported (test 30 of 40),
    population-copy m1 (8 of 40), best-of-n r1 (highest validation; test 15 of 40)."""
    build_population(out / f"population-s{seed}", seed=seed, status="finished")
    build_population(out / f"population-copy-s{seed}", seed=seed, mode="copy", auto=True, status="finished",
                     tests=(5, 8, 6))
    build_best_of_n(out / f"best-of-n-s{seed}", [8, 16, 12], [20, 15, 30], seed=seed)
    return out


def test_the_group_arms_run_only_when_named_and_keep_the_single_arms_defaults():
    assert compare.parse_arms(None) == list(compare.ARMS)  # the five, as before
    assert compare.parse_arms("best-of-n,population,static") == ["static", "population", "best-of-n"]
    with pytest.raises(UsageError, match="choose from .*population-copy"):
        compare.parse_arms("populations")
    base = to_dict(load_config(None, ["population.size=3", "train.tasks_per_step=4"]))
    assert compare.arm_config(base, "coevolve", 1).population.size == 0  # a single run stays one
    runs = [group_config(base, "best-of-n", 2, i) for i in range(3)]
    assert [c.seed for c in runs] == [member_seed(2, i) for i in range(3)]  # seeded as the members
    assert all(not c.evolve.enabled and c.population.size == 0 and c.name == "best-of-n" for c in runs)
    pop, copy = group_config(base, "population", 2), group_config(base, "population-copy", 2)
    assert (pop.population.size, pop.population.mode, pop.seed) == (3, "explore", 2)
    assert (copy.population.mode, copy.evolve.auto_promote) == ("copy", True)


def test_a_population_holds_its_members_slots_and_best_of_n_is_n_runs(tmp_path):
    (bon0, bon1) = units("best-of-n", 0, tmp_path, 2)
    assert (bon0.label, bon1.run_dir, bon1.log) == ("best-of-n-s0-r0", tmp_path / "best-of-n-s0" / "r1",
                                                    tmp_path / "best-of-n-s0" / "r1.log")
    (pop,) = units("population", 0, tmp_path, 4, jobs=3)
    assert pop.slots == 3 and pop.population and pop.log == tmp_path / "population-s0.log"
    assert compare.unit_gpus(pop, ["0", "1"], ["0"]) == ["1", "0"]  # least busy first, each once
    assert compare.unit_gpus(pop, [], []) == []
    args = compare.unit_args(tmp_path, to_dict(load_config(None, ["population.size=4"])), pop)
    assert args[-3:] == ["--auto-promote", "--jobs", "3"]
    assert load_config(tmp_path / "configs" / "population-s0.toml").population.size == 4
    build_population(tmp_path / "population-s1")
    (pop1,) = units("population", 1, tmp_path, 4, jobs=2)
    assert compare.unit_args(tmp_path, {}, pop1) == ["--resume", str(pop1.run_dir), "--jobs", "2"]


def test_each_group_is_one_row_reported_on_validation_with_its_test_interval(tmp_path):
    out = _grid(tmp_path / "cmp")
    rows = {r["arm"]: r for r in (compare.arm_row(a, 0, out, size=3) for a in compare.GROUP_ARMS)}
    assert {a: (r["reported"], r["heldout_acc"], r["complete"]) for a, r in rows.items()} == {
        "population": (1, 30 / N_TEST, True), "population-copy": (1, 8 / N_TEST, True),
        "best-of-n": (1, 15 / N_TEST, True)}  # r2 tests best (30) but r1 validated best: never chosen on test
    t = rows["population"]["test"]
    assert t["n"] == N_TEST and t["low"] < 0.75 < t["high"]
    assert rows["best-of-n"]["rollouts_used"] == 3 * 4 * 8  # every run's training rollouts
    missing = compare.arm_row("best-of-n", 7, out, size=3)
    assert (missing["status"], missing["complete"], missing["reported"]) == ("not started", False, None)
    assert compare.failures([missing], ["best-of-n"], [7]) == [
        "best-of-n-s7: not started at step 0 of None; last log line: (no output)"]


def test_the_report_pairs_the_population_with_best_of_n_and_selection_alone(tmp_path):
    out = _grid(tmp_path / "cmp")
    (out / "compare.json").write_text("[]")
    path, text = write_report([], tmp_path / "rep", groups=groups_in(out))
    md = path.read_text()
    # the reported members' final test outcomes, paired problem by problem (t0..t29 vs t0..t14)
    e = paired_binary([k < 15 for k in range(N_TEST)], [k < 30 for k in range(N_TEST)])
    assert f"- **population - best-of-n**: {e.effect:+.3f}, 95% CI [{e.ci_low:+.3f}, {e.ci_high:+.3f}]" in md
    assert "population - population-copy" in text and "+0.550" in text
    assert "| population | 1 | 3 | 0.750 | [0.598, 0.858] | 40 | 96 |" in md
    rows = {r["arm"]: r for r in json.loads((tmp_path / "rep" / "report.json").read_text())}
    assert rows["population"]["vs_best_of_n"]["effect"] == pytest.approx(e.effect)
    assert rows["population"]["vs_population_copy"]["n"] == N_TEST
    assert rows["best-of-n"]["reported_test"]["n"] == N_TEST and "vs_best_of_n" not in rows["best-of-n"]
    # the lineage: members, harness versions, evidence, outcome, a plot per population
    lineage = md.split("## Population lineage")[1]
    assert "| m0 | 0 | 4 | v2 | 0.600 | [0.387, 0.781] | 20 | m1 |" in lineage
    assert "| 1 | 2 | copy | m0 | m1 | applied | -0.500 [-0.700, -0.300] n 20 |" in lineage
    assert "won at step 4: +0.400 [+0.100, +0.600] n 20" in lineage
    assert "`sampling.temperature` 1.0 -> 1.2 (dead groups 0.9: all wrong)" in lineage
    svg = (tmp_path / "rep" / "lineage-population-s0.svg").read_text()
    assert svg.startswith("<svg") and ">m2</text>" in svg
    assert "| 0 | r1 | 1 | 0.800 | yes |" in md.split("## Best-of-N static")[1]


def test_evotui_report_takes_a_population_directory(tmp_path, capsys):
    from evotui.cli import main

    pop = build_population(tmp_path / "pop", status="finished")
    assert main(["report", str(pop)]) == 0
    md = (pop / "report" / "report.md").read_text()
    assert "### population-s0" in md and "supervised; reported member: m1." in md
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "not an evotui run directory or compare folder" in capsys.readouterr().err


def test_a_compare_over_finished_group_arms_keeps_them(tmp_path, capsys):
    """Resume: every unit found finished is kept as is; nothing is launched, the rows are written."""
    out = _grid(tmp_path / "cmp")
    before = PopulationStore.open(out / "population-s0", readonly=True)
    events = before.events()
    before.close()
    cfg = load_config(None, ["population.size=3"])
    rows = compare.run_parallel(cfg, [0], out, jobs=2, arms=list(compare.GROUP_ARMS))
    printed = capsys.readouterr().out
    assert printed.count("finished before") == 1 + 1 + 3  # two populations, three best-of-n runs
    assert [(r["arm"], r["complete"]) for r in rows] == [(a, True) for a in compare.GROUP_ARMS]
    assert not (out / "configs").exists() or not any((out / "configs").iterdir())
    after = PopulationStore.open(out / "population-s0", readonly=True)
    assert after.events() == events
    after.close()
    assert [r["arm"] for r in compare.run_compare(cfg, [0], out, quiet=True, arms=["best-of-n"])] == \
        list(compare.GROUP_ARMS)  # compare.json keeps the earlier arms' rows


def test_a_tiny_best_of_n_arm_trains_n_runs_and_reports_one(tmp_path, tiny_overrides, tiny_model):
    cfg = load_config(None, [*tiny_overrides, f"model.name={tiny_model}", "model.device=cpu", "model.engine=hf",
                             "model.threads=1", "steps=1", "population.size=2"])
    out = tmp_path / "cmp"
    (row,) = compare.run_compare(cfg, [3], out, quiet=True, arms=["best-of-n"])
    assert row["complete"] and row["members"] == 2 and row["reported"] in (0, 1), row
    assert row["rollouts_used"] >= 2 * cfg.train.tasks_per_step * cfg.train.group_size
    from backend.store import Store

    for i in range(2):
        s = Store.open(out / "best-of-n-s3" / f"r{i}", readonly=True)
        assert (s.run()["seed"], s.run()["status"]) == (member_seed(3, i), "finished")
        s.close()
    (g,) = groups_in(out)
    assert (g.arm, g.seed, len(g.members)) == ("best-of-n", 3, 2)


def test_compare_refuses_a_population_of_one(tmp_path, capsys):
    from evotui.cli import main

    assert main(["compare", "--population", "1", "--arms", "population", "--seeds", "0", "--out",
                 str(tmp_path / "cmp")]) == 2
    assert "a population has at least 2 members" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()
