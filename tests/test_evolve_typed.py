"""The evolution core's typed surface: untyped dicts in public signatures, and how deep a round's calls nest.

- A public function (or method) of `backend/evolve` that takes or returns `JSON` (or
  `dict[str, Any]`) hands its reader a dict whose keys they must look up elsewhere. There
  are none (`CEILING` 0): typed records replace them, converted at the store boundary
  (`backend/evolve/rows.py`, `skills.SkillRow`).
- A round's calls inside `backend/evolve` nest at most `MAX_DEPTH` frames deep
  (`benchmarks/round_modules.py` traces a real round at tiny sizes), so a reader can follow
  one step of the round down and back.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVOLVE = ROOT / "backend" / "evolve"
CEILING = 0
"""Public signatures in backend/evolve with an untyped dict: none; typed records replace them."""
MAX_DEPTH = 8
UNTYPED = ("JSON", "dict[str, Any]", "Dict[str, Any]")


def untyped_signatures(root: Path = EVOLVE) -> list[str]:
    """`module:function` for each public function or method whose annotations name an untyped dict."""
    out = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            anns = [a.annotation for a in args if a.annotation is not None]
            anns += [node.returns] if node.returns is not None else []
            text = " ".join(ast.unparse(a) for a in anns)
            if any(u in text for u in UNTYPED):
                out.append(f"{path.stem}:{node.name}")
    return out


def test_the_counter_sees_json_in_a_signature(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(x: JSON) -> int: ...\ndef g() -> dict[str, Any]: ...\n"
                                   "def _h(x: JSON) -> None: ...\ndef k(x: int) -> list[int]: ...\n")
    assert untyped_signatures(tmp_path) == ["m:f", "m:g"]


def test_untyped_public_signatures_in_evolve_do_not_grow() -> None:
    found = untyped_signatures()
    print(f"public signatures with an untyped dict in backend/evolve: {len(found)}")
    assert len(found) <= CEILING, f"{len(found)} > {CEILING}: type the new ones ({', '.join(found)})"


def test_a_round_nests_at_most_max_depth_calls_inside_evolve() -> None:
    spec = importlib.util.spec_from_file_location("round_modules", ROOT / "benchmarks" / "round_modules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("round_modules", module)
    spec.loader.exec_module(module)
    tracer = module.run_traced()
    assert tracer.depth <= MAX_DEPTH, " -> ".join(tracer.deepest)
