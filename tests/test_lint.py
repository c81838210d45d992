"""ruff finds nothing in backend/, evotui/ and tests/ (rules and exceptions: [tool.ruff] in pyproject.toml).

Run `ruff check backend evotui tests` to see the findings; `ruff check --fix` fixes the simple ones.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert exe, "ruff is not installed (pip install -e '.[test]')"
    r = subprocess.run([exe, "check", "--no-cache", "--output-format", "concise", "backend", "evotui", "tests"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
