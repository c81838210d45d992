"""Shared fixtures: every test gets its own EVOTUI_HOME; the dequantized
default model is cached once per session so real-model tests stay quick."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_CACHE = ROOT / ".pytest_cache" / "evotui-models"

# Tiny but real: the embedded default model, a few rollouts, short completions.
TINY = [
    "train.tasks_per_step=2", "train.group_size=2", "train.max_new_tokens_cap=24",
    "eval.n_tasks=2", "eval.max_new_tokens=16", "eval.every=100", "train.micro_batch=4",
]


def set_flags(*overrides: str) -> list[str]:
    """`--set KEY=VALUE` on the command line for each override, in order."""
    return [x for o in overrides for x in ("--set", o)]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVOTUI_MODEL_CACHE", str(MODEL_CACHE))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield


@pytest.fixture
def tiny_overrides():
    return list(TINY)


def varying_reward_harness(tmp: Path) -> Path:
    """The default math harness plus a reward that always varies, so every step trains (at
    tiny sizes the policy never answers right: with the default reward every group is dead)."""
    from backend.harness.loader import default_harness_path

    code = default_harness_path("math").read_text().replace(
        'REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}', 'REWARD_WEIGHTS = {"correct": 1.0, "length": 0.1}')
    assert "length" in code
    code += "\n\ndef reward_length(r):\n    return (len(r.completion) % 7) / 7\n"
    path = tmp / "harness.py"
    path.write_text(code)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 2-layer random Llama of width 32 with the default tokenizer (tests/tiny_llama.py)."""
    from tiny_llama import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def spread_harness(tmp_path_factory):
    """The default math harness plus a reward that never ties: every step trains."""
    from tiny_llama import write_spread_harness

    return write_spread_harness(tmp_path_factory.mktemp("harness") / "spread.py")
