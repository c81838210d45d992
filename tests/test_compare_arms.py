"""The compare arms, the run profiles and the report's statistics, without training
(the end-to-end run of every arm is tests/test_compare_report.py)."""

from __future__ import annotations

import argparse

import pytest

from backend.config import ConfigError, RunConfig, load_config, to_dict
from backend.errors import UsageError
from backend.tools import compare, report_stats
from evotui.cli import _profile_sets


def test_the_gpu_profile_fills_only_what_the_run_left_unset(tmp_path):
    cfg = load_config(None, ["profile=gpu"])
    assert cfg.profile == "gpu"
    assert (cfg.train.tasks_per_step, cfg.train.group_size, cfg.train.lr, cfg.train.max_new_tokens_cap) == \
        (64, 8, 1e-4, 256)
    assert (cfg.eval.n_val, cfg.eval.n_test, cfg.eval.every) == (200, 500, 20)
    # --set and the config file win; the deprecated eval.n_tasks still sizes both sets
    f = tmp_path / "c.toml"
    f.write_text("profile = 'gpu'\n[train]\ngroup_size = 4\n")
    cfg = load_config(f, ["train.lr=3e-5", "eval.n_tasks=2"])
    assert (cfg.train.group_size, cfg.train.lr, cfg.train.tasks_per_step) == (4, 3e-5, 64)
    assert (cfg.eval.n_val, cfg.eval.n_test) == (2, 2)


def test_gpu_fast_is_gpu_with_the_speed_settings_and_set_values_still_win():
    gpu, fast = load_config(None, ["profile=gpu"]), load_config(None, ["profile=gpu-fast"])
    assert fast.profile == "gpu-fast"
    t = fast.train
    assert (t.length_buckets, t.causal_only, t.lora_base_dtype, t.pass_tokens, t.checkpoint_overlap) == \
        (True, True, True, 65536, True)
    assert not (gpu.train.length_buckets or gpu.train.lora_base_dtype or gpu.train.checkpoint_overlap)
    assert not t.compile  # its first step compiles for a minute: not in a preset
    same = {k: v for k, v in to_dict(fast).items() if k not in ("profile", "train")}
    assert same == {k: v for k, v in to_dict(gpu).items() if k not in ("profile", "train")}
    assert load_config(None, ["profile=gpu-fast", "train.pass_tokens=32768"]).train.pass_tokens == 32768
    assert _profile_sets(argparse.Namespace(profile="gpu-fast", sets=[], config=None)) == ["profile=gpu-fast"]


def test_the_cpu_profile_fills_its_keys_and_harness_only_and_auto_resolves(monkeypatch):
    from backend import profiles

    assert profiles.fill(to_dict(RunConfig()), "cpu") == to_dict(RunConfig())  # keys already set stay
    cpu = profiles.fill({}, "cpu")
    assert dict(to_dict(load_config(None, ["profile=cpu"])), profile="") == \
        to_dict(load_config(None, [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in
                                   profiles.PROFILES["cpu"].items()] + [f"harness='{cpu['harness']}'"]))
    assert load_config(None, []).profile == ""  # a config built in code: no profile applied
    monkeypatch.setenv("EVOTUI_PROFILE_AUTO", "gpu")
    assert load_config(None, ["profile=auto"]).profile == "gpu"
    with pytest.raises(ConfigError, match="profile must be one of"):
        load_config(None, ["profile=tpu"])


def test_the_cli_profile_flag_wins_else_the_file_else_auto(tmp_path):
    ns = lambda **kw: argparse.Namespace(**{"profile": None, "sets": [], "config": None, **kw})  # noqa: E731
    assert _profile_sets(ns()) == ["profile=auto"]
    assert _profile_sets(ns(profile="cpu", sets=["profile=gpu"])) == ["profile=cpu"]
    assert _profile_sets(ns(sets=["profile=gpu"])) == []
    f = tmp_path / "arm.toml"
    f.write_text('profile = "gpu"\n')
    assert _profile_sets(ns(config=str(f))) == []  # a compare arm's config keeps its profile


def test_the_arms():
    assert compare.parse_arms(None) == list(compare.ARMS) == \
        ["static", "static-expert", "coevolve", "coevolve-expert", "control"]
    assert compare.parse_arms("control,static-expert") == ["static-expert", "control"]
    with pytest.raises(UsageError, match="unknown arm"):
        compare.parse_arms("static,expert")
    base = to_dict(load_config(None, ["train.tasks_per_step=4"]))
    se = compare.arm_config(base, "static-expert", 3)
    assert se.harness.endswith("defaults/math_expert.py") and not se.evolve.enabled and se.seed == 3
    ce = compare.arm_config(base, "coevolve-expert", 3)
    assert ce.harness == se.harness and ce.evolve.enabled and ce.evolve.auto_promote
    assert ce.evolve.proposer == "offline" and ce.name == "coevolve-expert"
    assert ce.evolve.skill_library == "run"  # seeds must not read each other's skills
    assert compare.arm_config(base, "coevolve", 3).harness == ""
    assert compare.arm_config(base, "control", 3, extra_tasks=2).train.tasks_per_step == 6


def test_arms_that_cannot_run_are_refused(tmp_path):
    with pytest.raises(UsageError, match="add coevolve"):
        compare.check_arms(RunConfig(), ["static", "control"], [0], tmp_path)
    with pytest.raises(UsageError, match="expert harness"):
        compare.check_arms(RunConfig(domain="math,code"), ["static-expert"], [0], tmp_path)
    compare.check_arms(RunConfig(), ["coevolve", "control"], [0], tmp_path)


def test_runs_are_pinned_to_the_least_busy_gpu(monkeypatch):
    gpus = ["0", "1", "2", "3"]
    busy: list[str] = []
    for _ in range(4):
        busy.append(compare.pick_gpu(gpus, busy))
    assert busy == ["0", "1", "2", "3"]  # round-robin while they all start
    assert compare.pick_gpu(gpus, ["0", "2", "3"]) == "1"  # the run on GPU 1 ended
    assert compare.pick_gpu(["0"], []) is None and compare.pick_gpu([], []) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert compare.visible_gpus() == ["2", "5"]


def test_runs_sharing_a_card_each_get_a_slice_of_it(tmp_path):
    """Eight runs on two cards: each new run's config caps it at 0.225 of its card, so which run
    meets an out-of-memory error no longer depends on its neighbours; a set share wins."""
    base = RunConfig()
    d = compare.grid_config(base, 8, ["0", "1"])
    compare.run_args(tmp_path, d, "static", 0, 0)
    assert load_config(tmp_path / "configs" / "static-s0.toml").model.gpu_share == pytest.approx(0.225)
    assert compare.grid_config(base, 2, ["0", "1"])["model"]["gpu_share"] == 0.0  # a card each
    assert compare.grid_config(base, 4, [])["model"]["gpu_share"] == 0.0  # the CPU
    base.model.gpu_share = 0.5
    assert compare.grid_config(base, 8, ["0", "1"])["model"]["gpu_share"] == 0.5


def _run(seed, curve, probes=0):
    return {"seed": seed, "test_evals": [{"step": s, "accuracy": a} for s, a in curve],
            "steps": [{"dead_group_frac": 0.5}], "promoted": [], "repeated": [], "blocked": [],
            "wall_s": 10.0, "train_rollouts": 100, "probe_rollouts": probes}


def test_report_statistics_over_seeds():
    arms = {"static-expert": [_run(0, [(0, 0.1), (10, 0.5)]), _run(1, [(0, 0.1), (10, 0.7)])],
            "coevolve-expert": [_run(0, [(0, 0.1), (10, 0.6)], 8), _run(1, [(0, 0.1), (10, 0.9)], 4),
                                _run(2, [(0, 0.1), (10, 0.9)])]}
    stats = {t["arm"]: t for t in report_stats.arm_stats(arms)}
    m, lo, hi = stats["static-expert"]["final"]
    assert m == pytest.approx(0.6) and (lo, hi) == pytest.approx((0.6 - 12.706 * 0.1, 0.6 + 12.706 * 0.1))
    assert stats["static-expert"]["auc"][0] == pytest.approx(0.35)
    assert stats["coevolve-expert"]["rollouts_mean"] == pytest.approx(104)
    (p,) = report_stats.paired(arms)
    assert p["arm"] == "coevolve-expert" and p["pairs"] == 2  # seed 2 has no static-expert to pair with
    assert p["final_diff"][0] == pytest.approx(0.15) and p["final_diff"][1] < 0.15 < p["final_diff"][2]
    md = "\n".join(report_stats.stats_lines(arms))
    assert "| final test | final 95% CI | test AUC | AUC 95% CI |" in md
    assert "| coevolve-expert | 2 | +0.150 | [" in md
    assert "| rollouts used |" in md
    assert report_stats.t_interval([0.4]) == (0.4, None, None)
    assert report_stats.t975(200) == pytest.approx(1.972, abs=1e-3)


def test_the_report_pairs_each_evolving_arm_with_its_twin_at_every_test_evaluation():
    """Did the promotions help on the test set? Each evolving run against its same-seed
    static twin at every test evaluation, paired over seeds and problems; `changed` counts the runs
    that had promoted a change that alters training before the evaluation (a diagnostic does not)."""
    import json

    from backend.tools.report_gate import against_twins, twin_lines

    def run(seed, right_by_step, promoted=()):
        evals = [{"step": s, "results_json": json.dumps([{"task_id": f"t{k}", "correct": k < right}
                                                         for k in range(10)])}
                 for s, right in right_by_step]
        return {"seed": seed, "test_evals": evals, "promoted": [{"kind": k, "promoted_step": s} for k, s in promoted]}

    arms = {"static": [run(0, [(0, 2), (20, 3)]), run(1, [(0, 2), (20, 3)])],
            "coevolve": [run(0, [(0, 2), (20, 9)], [("diagnostic", 5), ("reward", 10)]),
                         run(1, [(0, 2), (20, 8)], [("diagnostic", 5)]),
                         run(2, [(0, 2), (20, 9)])]}  # no twin: left out
    rows = against_twins(arms)
    assert [(r["arm"], r["twin"], r["step"], r["runs"], r["changed"]) for r in rows] == [
        ("coevolve", "static", 0, 2, 0), ("coevolve", "static", 20, 2, 1)]
    assert rows[0]["effect"].effect == 0.0 and rows[0]["effect"].n == 20
    assert rows[1]["effect"].effect == pytest.approx((6 + 5) / 20) and rows[1]["effect"].ci_low > 0
    md = "\n".join(twin_lines(arms))
    assert "## Did the promotions help on the test set?" in md and "| coevolve - static | 20 | 2 | 1 | +0.550 |" in md
    assert twin_lines({"static": arms["static"]}) == []


def test_the_report_sets_coevolve_against_its_budget_matched_control():
    """Does the search beat spending its rollouts on training? coevolve minus control, paired
    over seeds and problems, and seed by seed; no section without both arms."""
    import json

    from backend.tools.report_gate import control_lines

    def run(seed, right):
        results = [{"task_id": f"t{k}", "correct": k < right} for k in range(10)]
        return {"seed": seed, "test_evals": [{"step": 20, "accuracy": right / 10, "results_json": json.dumps(results)}]}

    arms = {"control": [run(0, 3), run(1, 5)], "coevolve": [run(0, 6), run(1, 4), run(2, 9)]}  # seed 2: no control
    md = "\n".join(control_lines(arms))
    assert "## Co-evolution against its budget-matched control" in md
    assert "- **coevolve - control**: +0.100, 95% CI [" in md and "20 paired problems" in md  # (+3 - 1) / 20
    assert "- per seed: s0 +0.300, s1 -0.100" in md
    assert control_lines({"coevolve": arms["coevolve"]}) == []
