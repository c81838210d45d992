"""benchmarks/gpu_twins.py's plan and verdicts (the GPU run itself is the lead's; see its docstring)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_twins  # noqa: E402


def args(**kw):
    base = dict(seeds=[0, 1, 2], suites=["default", "suite2"], per_card=6, sets=[])
    return SimpleNamespace(**{**base, **kw})


def test_suites_get_disjoint_cards_and_every_card_at_least_per_card_runs():
    runs = gpu_twins.plan(args(), ["0", "1", "2", "3"])
    by_card = {g: [r for r in runs if r["gpu"] == g] for g in "0123"}
    assert {r["suite"] for r in by_card["0"] + by_card["2"]} == {"default"}
    assert {r["suite"] for r in by_card["1"] + by_card["3"]} == {"suite2"}
    assert all(len(v) >= 6 for v in by_card.values())
    assert sum(r["arm"] != "load" for r in runs) == 2 * 3 * len(gpu_twins.ARMS)
    assert len({r["name"] for r in runs}) == len(runs)
    assert gpu_twins.share_for(runs, []) == round(0.9 / max(len(v) for v in by_card.values()), 3)
    assert gpu_twins.share_for(runs, ["model.gpu_share=0.1"]) is None


def test_load_runs_fill_a_card_with_few_runs():
    runs = gpu_twins.plan(args(seeds=[0], suites=["default"]), ["0", "1"])
    assert [sum(r["gpu"] == g for r in runs) for g in "01"] == [6, 6]
    assert sum(r["arm"] == "load" for r in runs) == 12 - len(gpu_twins.ARMS)


def test_without_a_gpu_nothing_is_pinned_or_filled():
    runs = gpu_twins.plan(args(seeds=[0], suites=["default"]), [])
    assert [r["gpu"] for r in runs] == [None] * len(gpu_twins.ARMS)
    assert gpu_twins.share_for(runs, []) is None


def run(losses, promoted=()):
    return {"steps": [{"step": i + 1, "loss": x, "grad_norm": 1.0, "reward_mean": 0.0, "entropy": 1.0}
                      for i, x in enumerate(losses)],
            "shapes": {i + 1: {"micro_batch": 8, "gen_batch": 512} for i in range(len(losses))},
            "promoted": [{"promoted_step": s, "kind": k} for s, k in promoted]}


def test_a_run_stopped_earlier_is_compared_on_the_steps_both_stored():
    c = gpu_twins.compare_pair(run([0.5, 0.4]), run([0.5, 0.4, 0.3]))
    assert c["steps"] == 2 and c["diverged"] is None and c["holds"]


def test_a_split_holds_only_after_a_training_altering_promotion():
    split = gpu_twins.compare_pair(run([0.5, 0.4, 0.1], [(1, "diagnostic")]), run([0.5, 0.4, 0.3]))
    assert split["diverged"] == 3 and not split["holds"] and split["promotion"] is None
    assert split["shape"] == "mb 8/8, gen 512/512"
    after = gpu_twins.compare_pair(run([0.5, 0.4, 0.1], [(2, "reward")]), run([0.5, 0.4, 0.3]))
    assert after["holds"] and after["promotion"] == 2


def test_a_second_call_resumes_stopped_runs_and_keeps_finished_ones(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    new = gpu_twins.run_argv(tmp_path / "r", cfg, "coevolve")
    assert new == ["--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--auto-promote"]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.db").write_text("")
    monkeypatch.setattr(gpu_twins, "_finished", lambda d: False)
    assert gpu_twins.run_argv(tmp_path / "r", cfg, "static") == ["--resume", str(tmp_path / "r")]
    monkeypatch.setattr(gpu_twins, "_finished", lambda d: True)
    assert gpu_twins.run_argv(tmp_path / "r", cfg, "static") is None


def test_under_mps_a_run_gets_the_daemons_folders_and_its_card_as_the_server_numbers_it(tmp_path, monkeypatch):
    """`--mps`: the daemon's client_env for the run's card goes into the run's environment."""
    from backend.mps import MpsDaemon

    seen = {}

    def fake_popen(argv, stdout, stderr, env, start_new_session):
        seen.update(env)
        return SimpleNamespace(pid=1)

    monkeypatch.setattr(gpu_twins.subprocess, "Popen", fake_popen)
    monkeypatch.setattr(gpu_twins, "run_argv", lambda run_dir, cfgf, arm: ["--config", str(cfgf)])
    (tmp_path / "logs").mkdir()
    pipes = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/p", "CUDA_MPS_LOG_DIRECTORY": "/tmp/l"}
    mps = MpsDaemon(env={**pipes, "CUDA_VISIBLE_DEVICES": "0,1"}, control="x", pipes=pipes, devices=["2", "3"])
    run = {"name": "static-s0", "arm": "static", "gpu": "3"}
    gpu_twins.launch(tmp_path, tmp_path, run, tmp_path / "c.toml", mps)
    assert seen["CUDA_VISIBLE_DEVICES"] == "1" and seen["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/p"
    seen.clear()
    gpu_twins.launch(tmp_path, tmp_path, run, tmp_path / "c.toml")
    assert seen["CUDA_VISIBLE_DEVICES"] == "3" and "CUDA_MPS_PIPE_DIRECTORY" not in seen
