"""Single-factor edits of a harness file, done on its syntax tree.

An intervention changes exactly one top-level name of the harness: it
replaces one constant assignment or one function, adds a function, or
removes one. Editing by AST position (not by regex) keeps the rest of the
file byte-for-byte, so the unified diff shows only the change.

    >>> code = "A = 1\\n\\ndef f(r):\\n    return 1\\n"
    >>> print(replace_name(code, "A", "A = 2"))
    A = 2
    <BLANKLINE>
    def f(r):
        return 1
    <BLANKLINE>

`apply_unified_diff` applies a diff written by someone else (an LLM) and
`changed_names` checks that the result is still a single-factor change.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


class EditError(ValueError):
    """The edit cannot be made; the message says why in one line."""


@dataclass(frozen=True)
class _Index:
    """One parse of a file: each top-level statement with the name it defines (None: it defines
    none), and the (first, last) lines of each named one, 1-based and inclusive."""

    stmts: tuple[tuple[str | None, ast.stmt], ...]
    spans: dict[str, tuple[int, int]]


@lru_cache(maxsize=256)  # a round reads the same parent for every draw and screen
def _index(code: str, what: str = "harness") -> _Index:
    """Parse `code` once (read only: cached); an EditError when it does not parse. The one place
    that says which statement defines which name (a function, or one assignment to a name)."""
    try:
        body = ast.parse(code).body
    except SyntaxError as e:
        raise EditError(f"{what} does not parse: line {e.lineno}: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:  # nesting too deep for the parser, and the like
        raise EditError(f"{what} does not parse: {type(e).__name__}: {str(e)[:100]}") from None
    stmts: list[tuple[str | None, ast.stmt]] = []
    spans: dict[str, tuple[int, int]] = {}
    for stmt in body:
        name = None
        if isinstance(stmt, ast.FunctionDef):
            name = stmt.name
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
        stmts.append((name, stmt))
        if name:
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            spans[name] = (first, stmt.end_lineno or stmt.lineno)
    return _Index(tuple(stmts), spans)


def top_level(code: str) -> dict[str, tuple[int, int]]:
    """Top-level names -> (first line, last line), 1-based and inclusive."""
    return dict(_index(code).spans)


def definition(code: str, name: str) -> str | None:
    """The source of one top-level definition, or None."""
    span = _index(code).spans.get(name)
    if not span:
        return None
    return "\n".join(code.splitlines()[span[0] - 1:span[1]])


def _one_definition(source: str, name: str | None) -> str:
    """Check that `source` defines exactly one top-level name; return it."""
    names = [n for n, s in _index(source, "new definition").stmts if not isinstance(s, ast.Expr)]
    if len(names) != 1 or names[0] is None:
        raise EditError(f"new definition must be exactly one assignment or function, got {len(names)} statements")
    if name and names[0] != name:
        raise EditError(f"new definition defines '{names[0]}', expected '{name}'")
    return names[0]


def replace_name(code: str, name: str, source: str) -> str:
    """Replace the definition of `name` with `source` (one definition of the same name)."""
    _one_definition(source, name)
    span = _index(code).spans.get(name)
    if not span:
        raise EditError(f"harness has no top-level '{name}' to replace")
    lines = code.splitlines()
    new = lines[:span[0] - 1] + source.rstrip("\n").splitlines() + lines[span[1]:]
    return "\n".join(new) + "\n"


def add_definition(code: str, source: str) -> str:
    """Append a new top-level definition at the end of the file."""
    name = _one_definition(source, None)
    if name in _index(code).spans:
        raise EditError(f"harness already defines '{name}'")
    return code.rstrip("\n") + "\n\n\n" + source.strip("\n") + "\n"


def remove_name(code: str, name: str) -> str:
    """Delete one top-level definition (and the blank lines it leaves)."""
    span = _index(code).spans.get(name)
    if not span:
        raise EditError(f"harness has no top-level '{name}' to remove")
    lines = code.splitlines()
    head, tail_ = lines[:span[0] - 1], lines[span[1]:]
    while head and not head[-1].strip() and tail_ and not tail_[0].strip():
        tail_ = tail_[1:]  # keep one run of blank lines where the definition was
    return "\n".join(head + tail_).rstrip("\n") + "\n"


def set_definition(code: str, name: str, source: str) -> str:
    """Replace `name` if it exists, else add it; empty `source` removes it."""
    if not source.strip():
        return remove_name(code, name)
    if name in _index(code).spans:
        return replace_name(code, name, source)
    _one_definition(source, name)
    return add_definition(code, source)


def constant(code: str, name: str) -> Any:
    """The literal value of a top-level constant, or None when it is not a literal."""
    for stmt_name, stmt in _index(code).stmts:
        if stmt_name == name and isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value:
            try:
                return ast.literal_eval(stmt.value)
            except ValueError:
                return None
    return None


def literal_source(value: Any, indent: int = 0) -> str:
    """Python source for a literal, double-quoted like the default harnesses.

    >>> literal_source({"a": 1.0, "b": [True, None]})
    '{"a": 1.0, "b": [True, None]}'
    """
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal_source(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal_source(k)}: {literal_source(v)}" for k, v in value.items()) + "}"
    raise EditError(f"cannot write {type(value).__name__} as a harness literal")


def set_constant(code: str, name: str, value: Any) -> str:
    return replace_name(code, name, f"{name} = {literal_source(value)}")


def unified_diff(old: str, new: str, old_label: str = "a/harness.py", new_label: str = "b/harness.py") -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        old_label, new_label))


def changed_names(old: str, new: str) -> list[str]:
    """Top-level names added, removed or changed between two versions (by AST, so
    formatting-only changes do not count)."""
    try:
        a, b = _statements(old), _statements(new)
    except RecursionError:
        raise EditError("harness is nested too deeply to compare") from None
    return sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))


@lru_cache(maxsize=1024)  # a round screens many draws against one parent (a 40-round test: 19,164 dumps, 40 s)
def _statements(code: str) -> dict[str, tuple[str, ...]]:
    """{top-level name: the AST dump of each statement that defines it} (read only: cached)."""
    # every statement counts, not only the last definition of a name: a second `def` of an
    # earlier name is a change of that name
    out: dict[str, tuple[str, ...]] = {}
    for name, s in _index(code).stmts:
        if not name and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            continue  # docstrings don't count
        key = name or ast.unparse(s).splitlines()[0][:60]  # imports, by text
        out[key] = out.get(key, ()) + (ast.dump(s),)
    return out


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _hunks(diff: str) -> list[tuple[int, list[str], list[str]]]:
    """(old start, old lines, new lines) for each hunk of a unified diff."""
    hunks: list[tuple[int, list[str], list[str]]] = []
    cur: tuple[int, list[str], list[str]] | None = None
    for line in diff.splitlines():
        m = _HUNK.match(line)
        if m:
            cur = (int(m.group(1)), [], [])
            hunks.append(cur)
        elif cur is None or line.startswith(("---", "+++")) and not cur[1] and not cur[2]:
            continue
        elif line.startswith("+"):
            cur[2].append(line[1:])
        elif line.startswith("-"):
            cur[1].append(line[1:])
        elif line.startswith(" ") or line == "":
            cur[1].append(line[1:])
            cur[2].append(line[1:])
        elif line.startswith("\\"):
            continue  # "\ No newline at end of file"
        else:
            raise EditError(f"diff line is not context, + or -: {line[:60]!r}")
    if not hunks:
        raise EditError("diff has no hunks")
    return hunks


def apply_unified_diff(code: str, diff: str) -> str:
    """Apply a unified diff. Each hunk must match exactly (trailing spaces aside);
    it is looked for at its stated line first, then anywhere, because LLMs get
    line numbers wrong more often than content."""
    lines = code.splitlines()
    offset = 0
    for n, (start, old, new) in enumerate(_hunks(diff), 1):
        want = [s.rstrip() for s in old]
        guess = start - 1 + offset

        def at(i: Any, want: Any = want) -> Any:
            return [s.rstrip() for s in lines[i:i + len(want)]] == want
        spots = [guess] if 0 <= guess <= len(lines) and at(guess) else \
            [i for i in range(len(lines) - len(want) + 1) if at(i)]
        if not spots:
            raise EditError(f"hunk {n} does not apply: its lines are not in the harness")
        i = min(spots, key=lambda s: abs(s - guess))
        lines[i:i + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + "\n"


@dataclass
class Edit:
    """One single-factor change: op is replace, add or remove."""

    op: str
    name: str
    source: str = ""

    def apply(self, code: str) -> str:
        if self.op == "replace":
            return replace_name(code, self.name, self.source)
        if self.op == "add":
            return add_definition(code, self.source)
        if self.op == "remove":
            return remove_name(code, self.name)
        if self.op == "set":
            return set_definition(code, self.name, self.source)
        raise EditError(f"unknown edit op '{self.op}'")


def reapply(base: str, changed: str, onto: str, name: str) -> str:
    """Re-apply the single-factor change `base` -> `changed` (of top-level `name`) onto `onto`,
    a newer version: a rebase. Refused when `onto` changed the same name too (which of the two
    changes should win is the operator's call, not ours).

    >>> reapply("A = 1\\nB = 1\\n", "A = 2\\nB = 1\\n", "A = 1\\nB = 3\\n", "A")
    'A = 2\\nB = 3\\n'
    """
    before, after = definition(base, name), definition(changed, name)
    if before is None and after is None:
        raise EditError(f"'{name}' is not a definition that can be moved to another version")
    if definition(onto, name) != before:
        raise EditError(f"the newer version changed '{name}' too")
    code = set_definition(onto, name, after or "")
    if changed_names(onto, code) != [name]:
        raise EditError(f"re-applied, the change no longer touches '{name}' alone")
    return code
