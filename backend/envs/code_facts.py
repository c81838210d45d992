"""Static facts about a code completion: the code it contains, the shape of the
function it defines, and the examples in the task's docstring.

All of it is evidence for the harness (diagnostics such as wrong_signature,
prints_instead_of_returns, redefines_check, special_cases_examples); none of
it decides a verdict. Every function here is total: odd text gives empty facts.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_CODE_START = re.compile(r"^(def |async def |class |import |from |@)", re.M)
_ARROW = re.compile(r"^\s*(==>|=>|->|➞|==|should return|returns?|is|:)?\s*(.*)$")


def extract_code(completion: str, entry_point: str | None = None) -> tuple[str, bool]:
    """(code, came_from_a_fenced_block). Prefers the last fenced block that
    defines the entry point, else the last fenced block; an unclosed fence
    (a truncated completion) still counts. Without a fence: the text from the
    first line that looks like code, or all of it (a continuation body).

    >>> extract_code("Sure:\\n```python\\ndef f():\\n    return 1\\n```\\n", "f")
    ('def f():\\n    return 1\\n', True)
    """
    text = completion or ""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    blocks = [b for b in blocks if b[0] in ("", "python", "py", "python3")] or blocks
    if blocks:
        if entry_point:
            defining = [b for _, b in blocks if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", b)]
            if defining:
                return defining[-1], True
        return blocks[-1][1], True
    m = _CODE_START.search(text)
    if m and m.start() > 0 and not _parses(text):
        return text[m.start():], False
    return text, False


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _tree(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _function(tree: ast.Module | None, name: str) -> ast.FunctionDef | None:
    if tree is None:
        return None
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return found[-1] if found else None


def _params(fn: ast.FunctionDef | None) -> list[str] | None:
    if fn is None:
        return None
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def code_facts(code: str, prompt: str, entry_point: str) -> dict:
    """Shape of the solution: does it parse, define the entry point with the
    prompt's parameters, return a value, print, or define `check`?"""
    own = _tree(code)
    fn = _function(own, entry_point)
    defines = fn is not None
    tree = own
    if fn is None:  # a continuation of the prompt's stub
        tree = _tree(prompt + code)
        fn = _function(tree, entry_point)
    syntax_error = None
    if tree is None:
        try:
            ast.parse(prompt + "\n" + code if defines else prompt + code)
        except (SyntaxError, ValueError) as e:
            syntax_error = f"{type(e).__name__}: {e}"[:200]
        except (RecursionError, MemoryError):
            syntax_error = "too deeply nested"
    body = list(ast.walk(fn)) if fn is not None else []
    # only a top-level `check` shadows the test's; a nested helper named check is fine
    check_defined = bool(re.search(r"^def\s+check\s*\(", code or "", re.M))
    return {
        "parses": tree is not None,
        "syntax_error": syntax_error,
        "defines_entry_point": defines,
        "params": _params(fn),
        "expected_params": _params(_function(_tree(prompt), entry_point)),
        "returns_value": any(isinstance(n, ast.Return) and n.value is not None
                             and not (isinstance(n.value, ast.Constant) and n.value.value is None)
                             for n in body) if fn is not None else None,
        "calls_print": any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
                           for n in body),
        "defines_check": check_defined,
        "n_lines": len([ln for ln in (code or "").splitlines() if ln.strip()]),
    }


def strip_docs(code: str) -> str:
    """The code without docstrings and comments (so the task's own examples in
    a copied docstring do not look like hard-coded answers)."""
    tree = _tree(code)
    if tree is None:
        code = re.sub(r'("""|\'\'\')(.*?)(\1|\Z)', "", code or "", flags=re.S)
        return re.sub(r"#[^\n]*", "", code)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    try:
        return ast.unparse(tree)
    except (ValueError, RecursionError):
        return code


def _call_args(line: str, start: int) -> tuple[str, int] | None:
    depth, quote = 0, None
    for k in range(start, len(line)):
        ch = line[k]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return line[start + 1:k], k + 1
    return None


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated parts of an argument list."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in args:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return [p for p in parts + [cur.strip()] if p]


def examples_from_prompt(prompt: str, entry_point: str, limit: int = 12) -> list[dict]:
    """Examples in the docstring: `>>> f(x)` followed by the result line, or
    `f(x) == y` / `=> y` / `-> y` / `➞ y` on one line.

    >>> examples_from_prompt('>>> add(2, 3)\\n5\\n', 'add')
    [{'args': '2, 3', 'parts': ['2', '3'], 'expected': '5'}]
    """
    lines = (prompt or "").splitlines()
    out = []
    for i, raw in enumerate(lines):
        s = raw.strip()
        doctest = s.startswith(">>>")
        s = s[3:].strip() if doctest else s
        at = s.find(entry_point + "(")
        if s.startswith("def ") or at < 0 or (at > 0 and (s[at - 1].isalnum() or s[at - 1] == "_")):
            continue
        call = _call_args(s, at + len(entry_point))
        if call is None:
            continue
        args, end = call
        rest = s[end:].strip()
        if doctest and not rest:
            nxt = next((ln.strip() for ln in lines[i + 1:] if ln.strip()), "")
            expected = "" if nxt.startswith(">>>") else nxt
        else:
            m = _ARROW.match(rest)
            expected = m.group(2).strip() if m and m.group(1) else ""
        expected = expected.rstrip(".,;")
        if expected:
            out.append({"args": args.strip(), "parts": _split_args(args), "expected": expected})
        if len(out) >= limit:
            break
    return out
