"""Loading harness code and calling it. Runs only inside the harness worker.

`load(code)` checks the source, executes it in a namespace with a small set
of builtins, views of the allowed modules and the helper library, deep-freezes
its top-level constants and returns a `Loaded` harness. `score` and `diagnose`
call its reward and diagnostic functions on one rollout; neither raises.

The engine never imports this module for untrusted code: it talks to the
worker (`backend.harness.client`), which imports it in a sandbox.
"""

from __future__ import annotations

import ast
import math
import statistics
from dataclasses import dataclass
from types import MappingProxyType, ModuleType, SimpleNamespace
from typing import Any

from .check import ALLOWED_IMPORTS, FUNCTOOLS_NAMES, HarnessError, check_source
from .helpers import HELPERS


SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "bool", "dict", "enumerate", "filter", "float", "frozenset", "int",
    "isinstance", "len", "list", "map", "max", "min", "range", "reversed", "round", "set",
    "sorted", "str", "sum", "tuple", "zip", "ValueError", "Exception", "KeyError",
    "IndexError", "TypeError", "ZeroDivisionError", "repr", "chr", "ord", "divmod",
    "pow", "hash", "iter", "next", "slice", "True", "False", "None",
)
HIDDEN_MODULE_ATTRS = {"Formatter"}
"""`string.Formatter().get_field("0.__class__", ...)` reads any attribute by a name built at run time."""
VIEW_FIELDS = ("question", "answer", "prompt", "completion", "finish", "completion_tokens", "max_new_tokens",
               "obs", "turns", "domain", "meta", "task_id")
"""What a harness sees of a rollout: the documented contract (README, 'What a harness sees')."""
MAX_EVIDENCE = 300
MAX_ERROR = 200


def _builtins() -> dict[str, Any]:
    import builtins

    return {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}


def module_view(mod: ModuleType) -> SimpleNamespace:
    """What harness code sees of an allowed module: its public functions, classes and
    constants, but not the modules it imported (`statistics.sys` is `sys`), except its
    own submodules (`collections.abc`); of functools only FUNCTOOLS_NAMES."""
    public = {}
    for k, v in vars(mod).items():
        if k.startswith("_") or k in HIDDEN_MODULE_ATTRS:
            continue
        if mod.__name__ == "functools" and k not in FUNCTOOLS_NAMES:
            continue
        if isinstance(v, ModuleType):
            if v.__name__ == f"{mod.__name__}.{k}":
                public[k] = module_view(v)
            continue
        public[k] = v
    return SimpleNamespace(**public)


def _safe_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: Any = 0) -> Any:
    if name.split(".")[0] not in ALLOWED_IMPORTS or level:
        raise ImportError(f"import of '{name}' is not allowed in a harness")
    return module_view(__import__(name, globals, locals, fromlist, level))


def freeze(value: Any) -> Any:
    """Deep-frozen copy of a literal: dicts become read-only mappings, lists tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, set):
        return frozenset(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON-able copy of a frozen constant (what crosses back to the engine)."""
    if isinstance(value, (dict, MappingProxyType)):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [thaw(v) for v in value]
    return value


class RolloutView:
    """What harness functions see of a rollout (read-only)."""

    __slots__ = VIEW_FIELDS

    def __init__(self, **kw: Any) -> None:
        for k in self.__slots__:
            object.__setattr__(self, k, freeze(kw.get(k)))

    def __setattr__(self, k: str, v: Any) -> None:
        raise AttributeError("rollouts are read-only in a harness")


@dataclass
class Loaded:
    ns: dict[str, Any]
    constants: dict[str, Any]
    rewards: dict[str, Any]
    diagnostics: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """Plain data for the engine: constants and function names."""
        return {"constants": {k: thaw(v) for k, v in self.constants.items()},
                "rewards": sorted(self.rewards), "diagnostics": sorted(self.diagnostics)}


def load(code: str) -> Loaded:
    tree = check_source(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None:
            # a bare `except:` would also catch the worker's time limit (a BaseException)
            node.type = ast.copy_location(ast.Name("Exception", ast.Load()), node)
    builtins = dict(_builtins(), __import__=_safe_import)
    ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "harness", "math": module_view(math),
                "statistics": module_view(statistics), **HELPERS}
    try:
        exec(compile(tree, "<harness>", "exec"), ns)  # noqa: S102 - checked, and inside the sandbox
    except Exception as e:
        raise HarnessError(f"harness failed to load: {type(e).__name__}: {str(e)[:MAX_ERROR]}") from None
    constants = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
            assert isinstance(target, ast.Name)  # check_source allows only `NAME = literal` at top level
            name = target.id
            constants[name] = ns[name] = freeze(ns[name])
    rewards = {k[7:]: v for k, v in ns.items() if k.startswith("reward_") and callable(v)}
    diagnostics = {k[9:]: v for k, v in ns.items() if k.startswith("diagnose_") and callable(v)}
    return Loaded(ns, constants, rewards, diagnostics)


def score(h: Loaded, names: list[str], r: RolloutView) -> tuple[dict[str, Any], dict[str, Any]]:
    """(components, errors) of the reward components `names`. A component that crashes or
    returns a non-finite or non-number value scores 0 and is reported in `errors`. The
    engine weighs them (`semantics.weighted_total`)."""
    comps: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    for name in names:
        try:
            v = h.rewards[name](r)
            if isinstance(v, bool):
                v = float(v)
            if type(v) not in (int, float) or not math.isfinite(v):  # no subclasses with a __float__
                raise ValueError(f"returned a {type(v).__name__}, not a finite number")
            v = float(v)
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"[:MAX_ERROR]
            v = 0.0
        comps[name] = v
    return comps, errors


def diagnose(h: Loaded, r: RolloutView) -> list[list[str]]:
    """Failure labels with evidence; a crashing diagnostic is reported, not raised."""
    out = []
    for label, fn in h.diagnostics.items():
        try:
            ev = fn(r)
            if ev:
                ev = ev if type(ev) is str else "fired"  # no __str__ of the candidate's objects runs here
        except Exception as e:
            out.append(["diagnostic_error", f"{label}: {type(e).__name__}: {e}"[:MAX_ERROR]])
            continue
        if ev:
            out.append([label, ev[:MAX_EVIDENCE]])
    return out
