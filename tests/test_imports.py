"""The process boundary holds: the TUI never imports torch; the store and config never import Textual."""

from __future__ import annotations

import subprocess
import sys

import pytest


def modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_app_does_not_import_torch():
    loaded = modules_after_import("evotui.app")
    assert "textual" in loaded
    assert not {m for m in loaded if m == "torch" or m.startswith(("torch.", "transformers", "peft"))}


@pytest.mark.parametrize("module", ["backend.store", "backend.store.reader", "backend.config"])
def test_store_and_config_do_not_import_textual(module):
    loaded = modules_after_import(module)
    assert not {m for m in loaded if m == "textual" or m.startswith(("textual.", "rich", "torch"))}
