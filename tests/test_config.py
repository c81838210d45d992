"""Config: TOML + --set overrides; every user mistake is one line and exit 2."""

import subprocess
import sys

import pytest

from backend.config import RESUME_FIXED, ConfigError, apply_overrides, check_resume, load_config, to_dict, to_toml


def test_defaults_and_overrides(tmp_path):
    cfg = load_config(None, ["train.group_size=8", "steps=5", "model.name=HuggingFaceTB/SmolLM2-135M"])
    assert cfg.train.group_size == 8 and cfg.steps == 5
    assert cfg.model.name == "HuggingFaceTB/SmolLM2-135M"
    f = tmp_path / "c.toml"
    f.write_text(to_toml(cfg))
    assert load_config(f).train.group_size == 8


@pytest.mark.parametrize("sets, msg", [
    (["train.group_size=1"], "group_size must be at least 2"),
    (["train.lr=-0.1"], "lr must be positive"),
    (["train.bogus=1"], "unknown config key 'train.bogus'"),
    (["train.group_size='four'"], "expected an integer"),
    (["model.name=./no/such/model"], "no such model path"),
    (["domain=chess"], "unknown domain"),
    (["evolve.proposer=magic"], "offline' or 'llm"),
    (["model.gen_batch=-8"], "gen_batch must be 0"),
])
def test_bad_values(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, sets)


def test_malformed_toml(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("steps = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f)


@pytest.mark.parametrize("args, msg", [
    (["--set", "train.group_size=1"], "group_size"),
    (["--config", "/nonexistent.toml"], "config file not found"),
    (["--set", "harness=/nonexistent/h.py"], "no such harness file"),
])
def test_cli_bad_input_exit_2_no_traceback(args, msg, tmp_path):
    p = subprocess.run([sys.executable, "-m", "evotui", "run", "--headless", "--run-dir", str(tmp_path / "r"), *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert msg in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # nothing half-written


def test_the_frontier_was_called_population_and_old_configs_still_load(tmp_path):
    from backend.config import config_from_dict, to_dict

    old = tmp_path / "old.toml"
    old.write_text("[evolve]\npopulation = 3\n")
    assert load_config(old).evolve.frontier == 3
    stored = to_dict(load_config(None))  # a run database written before the rename
    stored["evolve"].pop("frontier")
    stored["evolve"]["population"] = 2
    assert config_from_dict(stored).evolve.frontier == 2
    assert load_config(None, ["evolve.frontier=5"]).evolve.frontier == 5


def test_a_resume_may_change_how_a_run_trains_not_what_it_is_measured_against():
    from backend.config import config_from_dict

    stored = load_config(None, ["eval.n_test=12", "seed=3"])

    def resumed(*sets):
        return config_from_dict(apply_overrides(to_dict(stored), list(sets)))

    # the stored values again, and settings of how it trains or evolves: no change
    check_resume(stored, resumed("eval.n_test=12", "seed=3", "train.lr=1e-5", "evolve.every=3", "steps=40"))
    for key, value in [("eval.n_test", "13"), ("seed", "4"), ("model.lora_r", "8"),
                       ("math.datasets", "['gsm_symbolic']"), ("model.target_modules", "['q_proj']")]:
        assert key in RESUME_FIXED
        with pytest.raises(ConfigError, match=f"--resume cannot change {key.replace('.', '[.]')} "):
            check_resume(stored, resumed(f"{key}={value}"))
