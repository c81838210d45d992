"""The import contracts in .importlinter hold (backend never imports textual; the TUI never
imports torch; harness, envs and store never import evolve or policy; layers; no cycles).

`lint-imports` (import-linter) prints the full report; run it by hand to see which import
breaks a contract. The CLI may import the engine only inside its headless commands, which a
static import graph cannot tell from a module-level import, so that is checked at run time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "peft")


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, "--config", str(config), "--no-cache", "--no-logo"], cwd=ROOT,
                          capture_output=True, text=True)


def test_the_import_contracts_are_kept():
    r = lint_imports(ROOT / ".importlinter")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_a_broken_contract_fails(tmp_path):
    config = tmp_path / "broken.ini"
    config.write_text("[importlinter]\nroot_packages =\n    backend\n\n"
                      "[importlinter:contract:x]\nname = runs never imports the loop (false)\ntype = forbidden\n"
                      "source_modules =\n    backend.runs\nforbidden_modules =\n    backend.loop\n")
    r = lint_imports(config)
    assert r.returncode != 0 and "BROKEN" in r.stdout, r.stdout + r.stderr


def test_the_cli_imports_no_torch_until_a_headless_command_runs():
    code = ("import sys, evotui.cli, evotui.skills_cli; evotui.cli._parser().parse_args(['runs']); "
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(out.stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}
