"""mypy --strict finds nothing in the evolution core: backend/evolve, backend/store and
backend/harness (settings and per-module exceptions: [tool.mypy] in pyproject.toml).

Run `mypy` in the repository root to see the findings. The cache goes to a temporary
folder, so a run starts cold, as in CI (about 7 s on two cores: the large typed packages
the core only calls into are read as Any, see [tool.mypy.overrides]).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_on_the_evolution_core(tmp_path):
    exe = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    assert exe, "mypy is not installed (pip install -e '.[test]')"
    r = subprocess.run([exe, "--cache-dir", str(tmp_path / "mypy"), "--no-error-summary"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_check_is_strict_and_covers_the_core(tmp_path):
    """A planted untyped function in a checked package is a finding (the check can fail)."""
    planted = tmp_path / "backend" / "evolve"
    planted.mkdir(parents=True)
    (planted / "planted.py").write_text("def f(x):\n    return x\n")
    exe = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    assert exe
    r = subprocess.run([exe, "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "c"),
                        str(planted / "planted.py")], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "no-untyped-def" in r.stdout, r.stdout + r.stderr
