"""Config: TOML + --set overrides; every user mistake is one line and exit 2."""

import subprocess
import sys

import pytest

from backend.config import ConfigError, load_config, to_toml


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
