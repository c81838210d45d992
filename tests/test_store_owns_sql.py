"""The store owns the SQL: no module of backend/ or evotui/ outside backend/store holds a SQL
statement in a string (docstrings may name one). Other modules ask the store by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQL = re.compile(r"\b(SELECT\b[\s\S]+\bFROM\b|INSERT\s+(OR\s+\w+\s+)?INTO\b|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b|"
                 r"CREATE\s+(TABLE|INDEX|VIEW|TRIGGER)\b|DROP\s+(TABLE|INDEX)\b|ALTER\s+TABLE\b|PRAGMA\s+\w+)")
OUTSIDE_CODE = ("backend/store/", "backend/data/")  # the store itself; task repositories (data, not code)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def sql_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string in `source` that holds SQL, docstrings left out. The parts
    of an f-string are joined first, so `f"SELECT {cols} FROM t"` counts."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if SQL.search(text):
            found.append((node.lineno, " ".join(text.split())[:80]))
    return found


def test_finder_sees_sql_and_skips_docstrings():
    src = ('"""Reads with PRAGMA data_version."""\n'
           'def f(store, cols):\n'
           '    """SELECT x FROM y, in a docstring."""\n'
           '    store.rows(f"SELECT {cols} FROM rollouts WHERE step > ?", (1,))\n'
           '    store.conn.execute("UPDATE harness_versions SET status = \'x\'")\n'
           '    return "select the rows from history"\n')
    assert [line for line, _ in sql_strings(src)] == [4, 5]


def test_no_sql_outside_the_store():
    offenders = []
    for path in sorted([*ROOT.glob("backend/**/*.py"), *ROOT.glob("evotui/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(OUTSIDE_CODE):
            continue
        offenders += [f"{rel}:{line}: {text}" for line, text in sql_strings(path.read_text())]
    assert not offenders, "SQL outside backend/store (add a repository method to the store):\n" + "\n".join(offenders)
