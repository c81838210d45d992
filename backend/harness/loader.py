"""The harness file: format, checks, loading, and applying it to rollouts.

A harness is one Python file with these top-level names, each of which can be
changed alone (the evolution stage edits one at a time):

    DOMAIN          "math" | "code" | "swe"
    PROMPT          {"system": str, "template": str}     ({question} is filled in)
    SAMPLING        {"temperature", "top_p", "max_new_tokens"}
    REWARD_WEIGHTS  {"name": weight}   one per `reward_<name>(r)` function
    ADVANTAGE       {"rule": "group_std" | "group_mean" | "rank", "eps": float}
    FILTERS         {"drop_dead_groups": bool, "drop_truncated": bool, "drop_invalid": bool}
    CURRICULUM      {"datasets": {name: weight}, "level": int, ...}
    VALIDITY        [labels that mark a rollout invalid (reward hacks)]
    reward_<name>(r) -> float         a reward component
    diagnose_<label>(r) -> str | None evidence when the failure label applies

`r` is a read-only `RolloutView` (question, answer, completion, finish, ...).
Before any code runs it is checked: it must parse, import only from an
allowlist, avoid dunder tricks and I/O builtins, and stay under a size limit.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
import statistics
import string
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType, SimpleNamespace

from .lib import HELPERS

MAX_BYTES = 64_000
ALLOWED_IMPORTS = {"re", "math", "statistics", "collections", "itertools", "functools", "string"}
FORBIDDEN_NAMES = {
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "input", "breakpoint", "help", "memoryview", "type", "object",
    "super", "classmethod", "staticmethod", "property", "exit", "quit", "dir", "id",
}
SAFE_BUILTINS = {
    name: __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
    for name in (
        "abs", "all", "any", "bool", "dict", "enumerate", "filter", "float", "frozenset", "int",
        "isinstance", "len", "list", "map", "max", "min", "range", "reversed", "round", "set",
        "sorted", "str", "sum", "tuple", "zip", "ValueError", "Exception", "KeyError",
        "IndexError", "TypeError", "ZeroDivisionError", "repr", "chr", "ord", "divmod",
        "pow", "hash", "iter", "next", "slice", "True", "False", "None",
    )
}
INTERNAL_ATTR = re.compile(r"^(gi|cr|ag|f|tb|co)_|^mro$")
"""Frame, code and traceback attributes (`g.gi_frame.f_back.f_globals` reaches the caller's
globals) and `mro` (`Exception.mro()[1]` is BaseException, which would catch the replay's time limit)."""
HIDDEN_MODULE_ATTRS = {"Formatter"}
"""`string.Formatter().get_field("0.__class__", ...)` reads any attribute by a name built at run time."""
REQUIRED = ("DOMAIN", "PROMPT", "SAMPLING", "REWARD_WEIGHTS", "ADVANTAGE", "FILTERS", "CURRICULUM")
ADVANTAGE_RULES = ("group_std", "group_mean", "rank")


class HarnessError(ValueError):
    """The harness file is unusable; the message says why in one line."""


def sha(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def module_view(mod: ModuleType) -> SimpleNamespace:
    """What harness code sees of an allowed module: its public functions, classes and
    constants, but not the modules it imported (`statistics.sys` is `sys`), except its
    own submodules (`collections.abc`), and not HIDDEN_MODULE_ATTRS."""
    public = {}
    for k, v in vars(mod).items():
        if k.startswith("_") or k in HIDDEN_MODULE_ATTRS:
            continue
        if isinstance(v, ModuleType):
            if v.__name__ == f"{mod.__name__}.{k}":
                public[k] = module_view(v)
            continue
        public[k] = v
    return SimpleNamespace(**public)


def _safe_import(name, globals=None, locals=None, fromlist=(), level=0):
    if name.split(".")[0] not in ALLOWED_IMPORTS or level:
        raise ImportError(f"import of '{name}' is not allowed in a harness")
    return module_view(__import__(name, globals, locals, fromlist, level))


def parse(code: str) -> ast.Module:
    """`ast.parse`, with every way it can fail as a HarnessError."""
    try:
        size = len(code.encode())
    except UnicodeEncodeError:
        raise HarnessError("harness is not valid UTF-8 text") from None
    if size > MAX_BYTES:
        raise HarnessError(f"harness is {size} bytes; the limit is {MAX_BYTES}")
    try:
        return ast.parse(code)
    except SyntaxError as e:
        raise HarnessError(f"syntax error on line {e.lineno}: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, nesting too deep for the parser
        raise HarnessError(f"harness does not parse: {type(e).__name__}: {str(e)[:100]}") from None


def check_source(code: str) -> ast.Module:
    """Static checks; raises HarnessError naming the first problem found."""
    tree = parse(code)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in ALLOWED_IMPORTS:
                    raise HarnessError(f"line {line}: import of '{a.name}' is not allowed")
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] not in ALLOWED_IMPORTS:
                raise HarnessError(f"line {line}: import from '{node.module}' is not allowed")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise HarnessError(f"line {line}: name '{node.id}' is not allowed in a harness")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise HarnessError(f"line {line}: private attribute '.{node.attr}' is not allowed")
        elif isinstance(node, ast.Attribute) and INTERNAL_ATTR.search(node.attr):
            raise HarnessError(f"line {line}: interpreter internals ('.{node.attr}') are not allowed")
        elif isinstance(node, (ast.Global, ast.Nonlocal, ast.ClassDef, ast.AsyncFunctionDef,
                               ast.Await, ast.Yield, ast.YieldFrom)):
            raise HarnessError(f"line {line}: {type(node).__name__} is not allowed in a harness")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value \
                and len(node.value) < 40 and node.value.strip("_").isidentifier():
            raise HarnessError(f"line {line}: dunder string '{node.value}' is not allowed")
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign,
                                 ast.FunctionDef, ast.Expr)):
            raise HarnessError(f"line {stmt.lineno}: only imports, constants and functions at top level")
        if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Constant):
            raise HarnessError(f"line {stmt.lineno}: top-level expressions are not allowed")
    return tree


class RolloutView:
    """What harness functions see of a rollout (read-only)."""

    __slots__ = ("question", "answer", "prompt", "completion", "finish", "completion_tokens",
                 "max_new_tokens", "obs", "turns", "domain", "meta", "task_id")

    def __init__(self, **kw):
        for k in self.__slots__:
            v = kw.get(k)
            if isinstance(v, dict):
                v = MappingProxyType(v)
            object.__setattr__(self, k, v)

    def __setattr__(self, k, v):
        raise AttributeError("rollouts are read-only in a harness")

    @classmethod
    def from_row(cls, row: dict) -> "RolloutView":
        """Rebuild from a stored `rollouts` row (used by replay)."""
        import json

        task = json.loads(row.get("task_json") or "{}")
        obs = json.loads(row.get("obs_json") or "{}")
        return cls(question=task.get("question", ""), answer=task.get("answer"),
                   prompt=row.get("prompt", ""), completion=row.get("completion") or "",
                   finish=row.get("finish", ""), completion_tokens=row.get("completion_tokens") or 0,
                   max_new_tokens=obs.pop("_max_new_tokens", 0), obs=obs,
                   turns=tuple(obs.pop("_turns", ()) or ()), domain=row.get("domain", ""),
                   meta=task.get("meta") or {}, task_id=row.get("task_id", ""))


@dataclass
class Harness:
    code: str
    ns: dict
    sha: str
    rewards: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)

    # -------------------------------------------------------------- loading
    @classmethod
    def from_code(cls, code: str) -> "Harness":
        tree = check_source(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and node.type is None:
                # a bare `except:` would also catch the replay's time limit (a BaseException)
                node.type = ast.copy_location(ast.Name("Exception", ast.Load()), node)
        builtins = dict(SAFE_BUILTINS, __import__=_safe_import)
        ns: dict = {"__builtins__": builtins, "__name__": "harness", "math": module_view(math),
                    "statistics": module_view(statistics), **HELPERS}
        try:
            exec(compile(tree, "<harness>", "exec"), ns)  # noqa: S102 - checked above
        except Exception as e:
            raise HarnessError(f"harness failed to load: {type(e).__name__}: {str(e)[:200]}") from None
        missing = [n for n in REQUIRED if n not in ns]
        if missing:
            raise HarnessError(f"harness lacks {', '.join(missing)}")
        h = cls(code=code, ns=ns, sha=sha(code))
        h.rewards = {k[7:]: v for k, v in ns.items() if k.startswith("reward_") and callable(v)}
        h.diagnostics = {k[9:]: v for k, v in ns.items() if k.startswith("diagnose_") and callable(v)}
        try:
            h._validate()
        except HarnessError:
            raise
        except Exception as e:  # e.g. float("hot") for a temperature
            raise HarnessError(f"harness constants are malformed: {type(e).__name__}: {str(e)[:200]}") from None
        return h

    @classmethod
    def from_file(cls, path: str | Path) -> "Harness":
        p = Path(path)
        try:
            code = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise HarnessError(f"cannot read harness {p}: {e}") from None
        return cls.from_code(code)

    def _validate(self) -> None:
        if not isinstance(self.ns["DOMAIN"], str):
            raise HarnessError("DOMAIN must be a string")
        for name in REQUIRED[1:]:
            value = self.ns[name]
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise HarnessError(f"{name} must be a dict with string keys")
        v = self.ns.get("VALIDITY", ())
        if not isinstance(v, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in v):
            raise HarnessError("VALIDITY must be a list of label names")
        w = self.ns["REWARD_WEIGHTS"]
        if not w:
            raise HarnessError("REWARD_WEIGHTS must be a non-empty dict")
        for name, weight in w.items():
            if name not in self.rewards:
                raise HarnessError(f"REWARD_WEIGHTS names '{name}' but there is no reward_{name}()")
            if not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise HarnessError(f"REWARD_WEIGHTS['{name}'] must be a finite number")
        rule = self.advantage.get("rule")
        if rule not in ADVANTAGE_RULES:
            raise HarnessError(f"ADVANTAGE rule '{rule}' is not one of {', '.join(ADVANTAGE_RULES)}")
        eps = self.advantage.get("eps", 1e-6)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
            raise HarnessError("ADVANTAGE eps must be a positive finite number")
        s = self.sampling
        if not (0 <= float(s.get("temperature", 1.0)) <= 5 and 0 < float(s.get("top_p", 1.0)) <= 1):
            raise HarnessError("SAMPLING temperature must be in [0, 5] and top_p in (0, 1]")
        if int(s.get("max_new_tokens", 1)) < 1:
            raise HarnessError("SAMPLING max_new_tokens must be at least 1")
        for key in ("system", "template"):
            if not isinstance(self.prompt.get(key, ""), str):
                raise HarnessError(f"PROMPT {key} must be a string")
        for _text, field_name, spec, conv in string.Formatter().parse(self.prompt.get("template", "{question}")):
            # `{question.__class__}` would read attributes, `{question:>999999999}` allocate a gigabyte
            if field_name is not None and (not field_name.isidentifier() or spec or conv):
                raise HarnessError(f"PROMPT template field '{{{field_name}}}' must be a plain {{name}}")

    # -------------------------------------------------------------- parts
    domain = property(lambda self: self.ns["DOMAIN"])
    prompt = property(lambda self: dict(self.ns["PROMPT"]))
    sampling = property(lambda self: dict(self.ns["SAMPLING"]))
    weights = property(lambda self: dict(self.ns["REWARD_WEIGHTS"]))
    advantage = property(lambda self: dict(self.ns["ADVANTAGE"]))
    filters = property(lambda self: dict(self.ns["FILTERS"]))
    curriculum = property(lambda self: dict(self.ns["CURRICULUM"]))
    validity = property(lambda self: set(self.ns.get("VALIDITY", ())))

    # -------------------------------------------------------------- applying
    def score(self, r: RolloutView) -> tuple[float, dict]:
        """Weighted reward and its named components. Never raises: a component
        that crashes or returns a non-finite or non-number value scores 0 and is
        reported under `_errors`."""
        comps: dict = {}
        errors = {}
        total = 0.0
        for name, weight in self.weights.items():
            try:
                v = self.rewards[name](r)
                if isinstance(v, bool):
                    v = float(v)
                if not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"returned {v!r}, not a finite number")
                v = float(v)
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"[:200]
                v = 0.0
            comps[name] = v
            total += weight * v
        if not math.isfinite(total):  # finite parts with huge weights can still overflow
            errors["_total"] = f"weighted total {total!r} is not finite"
            total = 0.0
        if errors:
            comps["_errors"] = errors
        return total, comps

    def diagnose(self, r: RolloutView) -> list[tuple[str, str]]:
        """Failure labels with evidence; a crashing diagnostic is reported, not raised."""
        out = []
        for label, fn in self.diagnostics.items():
            try:
                ev = fn(r)
            except Exception as e:
                out.append(("diagnostic_error", f"{label}: {type(e).__name__}: {e}"[:200]))
                continue
            if ev:
                out.append((label, str(ev)[:500]))
        return out

    def messages(self, task) -> list[dict]:
        from backend.envs.base import message_prompt

        p = self.prompt
        return message_prompt(p.get("system", ""), p.get("template", "{question}"), task)


def advantages(rewards: list[float], rule: str, eps: float = 1e-6) -> list[float]:
    """Group-relative advantages for one group.

    >>> advantages([1.0, 0.0], "group_std")
    [0.9999990000010001, -0.9999990000010001]
    """
    n = len(rewards)
    mean = sum(rewards) / n
    if rule == "group_mean":
        return [r - mean for r in rewards]
    if rule == "rank":
        order = sorted(range(n), key=lambda i: rewards[i])
        ranks = [0.0] * n
        for pos, i in enumerate(order):
            ranks[i] = pos
        # ties share the mean rank, so a dead group still gets zero advantage
        by_value: dict = {}
        for i, r in enumerate(rewards):
            by_value.setdefault(r, []).append(ranks[i])
        ranks = [sum(by_value[r]) / len(by_value[r]) for r in rewards]
        mid = (n - 1) / 2
        return [(x - mid) / max(mid, 1) for x in ranks]
    std = statistics.pstdev(rewards) if n > 1 else 0.0
    return [(r - mean) / (std + eps) for r in rewards]


def default_harness_path(domain: str) -> Path:
    return Path(__file__).parent / "defaults" / f"{domain}.py"


def load_default(domain: str) -> Harness:
    return Harness.from_file(default_harness_path(domain))
