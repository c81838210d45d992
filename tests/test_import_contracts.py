"""The import contracts in .importlinter hold (backend never imports textual; the TUI never
imports torch; harness, envs and store never import evolve or policy; layers; no cycles), and
no module of backend or evotui reaches itself through imports, type-only ones included (a
package's `__init__` counts as a module: the sibling contract does not see a submodule
importing its own package).

`lint-imports` (import-linter) prints the full report; run it by hand to see which import
breaks a contract. The CLI may import the engine only inside its headless commands, which a
static import graph cannot tell from a module-level import, so that is checked at run time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

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


def import_cycles(*packages: str) -> list[list[str]]:
    """The import cycles among `packages` (imports under TYPE_CHECKING and inside functions
    included: a type-only import still ties two modules together for a reader): each a strongly
    connected set of modules."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            part = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(part) > 1:
                cycles.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return cycles


def test_no_module_reaches_itself_through_imports():
    assert import_cycles("backend") == []
    assert import_cycles("evotui") == []


def test_a_type_only_import_back_is_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "typed_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("from typed_pkg import hooks\n")
    (pkg / "hooks.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                  "    from typed_pkg.engine import Engine\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("typed_pkg") == [["typed_pkg.engine", "typed_pkg.hooks"]]


def test_a_package_whose_submodule_imports_it_back_is_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("LIMIT = 3\nfrom .reader import read\n")
    (pkg / "reader.py").write_text("from cyclic_pkg import LIMIT  # the package itself, as store.reader did\n\n"
                                   "def read():\n    return LIMIT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic_pkg") == [["cyclic_pkg", "cyclic_pkg.reader"]]


def test_the_decide_step_never_reaches_the_judge():
    """Promotion (a round's decide step, and the end of every operator approval) does not import
    the judge, even indirectly: a rebase's second judgement is a step of its own, taken by the
    round or the operator's command, never a call from inside promotion."""
    graph = grimp.build_graph("backend", exclude_type_checking_imports=False, cache_dir=None)
    assert graph.find_shortest_chain(importer="backend.evolve.promotion", imported="backend.evolve.backtest") is None
    assert graph.find_shortest_chain(importer="backend.evolve.operator_commands",
                                     imported="backend.evolve.backtest") is not None  # the sequence's judge step
