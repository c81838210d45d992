"""The static check on harness source: a fast first filter, not the defence.

Harness code is untrusted. What keeps it away from the engine is the process
boundary (`backend.harness.client`: it runs only in a sandboxed worker); this
check only rejects early, with one clear line, what no honest harness needs:

- imports outside a small allowlist (and, of functools, only a few names);
- names and attributes that reach interpreter internals (dunders, frames,
  `eval`, `open`, ...), attribute assignment, `global` / `nonlocal`, classes,
  generators, `match` class patterns;
- top-level constants that are not literals (`ast.literal_eval`-able), so no
  constant can run code, rebind a helper with a walrus or hold a lambda;
- duplicate top-level names (a second `def` would silently win);
- string annotations (evaluated later by `typing` / `singledispatch`);
- `.format` / `.format_map` except on a literal whose fields are plain names;
- mutable or computed default arguments, and decorators other than the
  functools caches.

Pure standard library (and `backend.errors`, which imports nothing): this file is also
copied into the harness worker.
"""

from __future__ import annotations

import ast
import re
import string
from typing import NoReturn

from backend.errors import EvoError

MAX_BYTES = 64_000
ALLOWED_IMPORTS = {"re", "math", "statistics", "collections", "itertools", "functools", "string"}
FUNCTOOLS_NAMES = {"reduce", "partial", "lru_cache", "cache", "cmp_to_key"}
FORBIDDEN_NAMES = {
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "input", "breakpoint", "help", "memoryview", "type", "object",
    "super", "classmethod", "staticmethod", "property", "exit", "quit", "dir", "id", "format",
}
INTERNAL_ATTR = re.compile(r"^(gi|cr|ag|f|tb|co)_|^mro$|^format_map$")
"""Frame, code and traceback attributes (`g.gi_frame.f_back.f_globals`), `mro`
(`Exception.mro()[1]` is BaseException) and `format_map` (a format walk)."""
ALLOWED_DECORATORS = {"lru_cache", "cache", "functools.lru_cache", "functools.cache"}
BANNED_NODES = (ast.Global, ast.Nonlocal, ast.ClassDef, ast.AsyncFunctionDef, ast.Await, ast.Yield,
                ast.YieldFrom, ast.MatchClass, ast.AsyncFor, ast.AsyncWith)


class HarnessError(EvoError, ValueError):
    """The harness file is unusable; the message says why in one line."""


def parse(code: str) -> ast.Module:
    """`ast.parse`, with every way it can fail as a HarnessError."""
    if not isinstance(code, str):
        raise HarnessError("harness code must be text")
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
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, nesting too deep
        raise HarnessError(f"harness does not parse: {type(e).__name__}: {str(e)[:100]}") from None


def check_source(code: str) -> ast.Module:
    """Static checks; raises HarnessError naming the first problem found.

    >>> check_source("DOMAIN = 'math'\\nX = len('a')")
    Traceback (most recent call last):
    ...
    backend.harness.check.HarnessError: line 2: top-level constant 'X' must be a literal
    """
    tree = parse(code)
    try:
        literal_formats = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
                           and isinstance(n.func, ast.Attribute) and n.func.attr == "format"
                           and isinstance(n.func.value, ast.Constant) and isinstance(n.func.value.value, str)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "format" and id(node) not in literal_formats:
                _fail(node, "'.format' is allowed only when called directly on a string literal")
            _check_node(node)
    except RecursionError:
        raise HarnessError("harness nests too deeply") from None
    _check_top_level(tree)
    return tree


def _fail(node: ast.AST, what: str) -> NoReturn:
    raise HarnessError(f"line {getattr(node, 'lineno', '?')}: {what}")


def _check_node(node: ast.AST) -> None:
    if isinstance(node, BANNED_NODES):
        _fail(node, f"{type(node).__name__} is not allowed in a harness")
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] not in ALLOWED_IMPORTS:
                _fail(node, f"import of '{a.name}' is not allowed")
    elif isinstance(node, ast.ImportFrom):
        if node.level or (node.module or "").split(".")[0] not in ALLOWED_IMPORTS:
            _fail(node, f"import from '{node.module}' is not allowed")
        if node.module == "functools" and any(a.name not in FUNCTOOLS_NAMES for a in node.names):
            _fail(node, f"from functools only {', '.join(sorted(FUNCTOOLS_NAMES))} may be imported")
    elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
        _fail(node, f"name '{node.id}' is not allowed in a harness")
    elif isinstance(node, ast.Attribute):
        _check_attribute(node)
    elif isinstance(node, ast.Call):
        _check_format_call(node)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value \
            and len(node.value) < 40 and node.value.strip("_").isidentifier():
        _fail(node, f"dunder string '{node.value}' is not allowed")
    elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
        _check_function(node)
    elif isinstance(node, ast.AnnAssign):
        _check_annotation(node.annotation)


def _check_attribute(node: ast.Attribute) -> None:
    if node.attr.startswith("_"):
        _fail(node, f"private attribute '.{node.attr}' is not allowed")
    if INTERNAL_ATTR.search(node.attr):
        _fail(node, f"'.{node.attr}' is not allowed in a harness")
    if not isinstance(node.ctx, ast.Load):
        _fail(node, f"assigning attribute '.{node.attr}' is not allowed")
    if isinstance(node.value, ast.Name) and node.value.id == "functools" and node.attr not in FUNCTOOLS_NAMES:
        _fail(node, f"functools.{node.attr} is not allowed (only {', '.join(sorted(FUNCTOOLS_NAMES))})")


def _check_format_call(node: ast.Call) -> None:
    """The fields of `"...".format(...)` (that the receiver is a literal, check_source checked)."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "format" and isinstance(func.value, ast.Constant) \
            and isinstance(func.value.value, str):
        _check_format_fields(node, func.value.value)


def _check_format_fields(node: ast.AST, template: str) -> None:
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        _fail(node, "malformed format string")
    for _text, name, spec, _conv in fields:
        if name is None:
            continue
        if name and not (name.isidentifier() or name.isdigit()):
            _fail(node, f"format field '{{{name}}}' must be a plain name (no attribute or index)")
        if spec and "{" in spec:
            _fail(node, "nested format fields are not allowed")


def _check_function(node: ast.FunctionDef | ast.Lambda) -> None:
    args = node.args
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not _is_immutable_literal(default):
            _fail(default, "default arguments must be immutable literals (numbers, strings, tuples, None)")
    if isinstance(node, ast.FunctionDef):
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if ast.unparse(target) not in ALLOWED_DECORATORS:
                _fail(dec, f"decorator '{ast.unparse(target)}' is not allowed (only functools caches)")
            if isinstance(dec, ast.Call) and not all(_is_immutable_literal(a) for a in
                                                     [*dec.args, *(k.value for k in dec.keywords)]):
                _fail(dec, "decorator arguments must be literals")
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.annotation is not None:
                _check_annotation(a.annotation)
        if node.returns is not None:
            _check_annotation(node.returns)


ANNOTATION_NODES = (ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.Load, ast.BinOp, ast.BitOr)


def _check_annotation(ann: ast.AST) -> None:
    """Annotations run when the module or the `def` does: only plain type names may appear."""
    for sub in ast.walk(ann):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            _fail(ann, "string annotations are not allowed (they are evaluated later)")
        if not (isinstance(sub, ANNOTATION_NODES) or (isinstance(sub, ast.Constant) and sub.value is None)):
            _fail(ann, "an annotation may only name types (no calls or other expressions)")


def _is_immutable_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Tuple):
        return all(_is_immutable_literal(e) for e in node.elts)
    return False


def top_level_names(stmt: ast.stmt) -> list[str]:
    """The names a top-level statement binds."""
    if isinstance(stmt, ast.FunctionDef):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _check_top_level(tree: ast.Module) -> None:
    seen: dict[str, int] = {}
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.Expr)):
            _fail(stmt, "only imports, constants and functions at top level")
        if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Constant):
            _fail(stmt, "top-level expressions are not allowed")
        if isinstance(stmt, ast.Assign):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None
            if not isinstance(target, ast.Name):
                _fail(stmt, "a top-level constant is one plain name = literal")
            _check_literal(target.id, stmt.value)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None or not isinstance(stmt.target, ast.Name):
                _fail(stmt, "a top-level constant is one plain name = literal")
            _check_literal(stmt.target.id, stmt.value)
        for name in top_level_names(stmt):
            if name in seen:
                _fail(stmt, f"'{name}' is defined twice at top level (first on line {seen[name]})")
            seen[name] = stmt.lineno


def _check_literal(name: str, value: ast.AST) -> None:
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        _fail(value, f"top-level constant '{name}' must be a literal")
