"""The one-shot edit format of SWE levels 0 and 1, its parser and its application.

A one-shot answer is one search/replace block, optionally naming its file on
the line before the SEARCH marker (level 1 needs the file; level 0 defaults
to the one file shown):

    ```edit
    pkg/module.py
    <<<<<<< SEARCH
        return a < b
    =======
        return a <= b
    >>>>>>> REPLACE
    ```

or one line: `replace line 12 with:    return a <= b` (the rest of the line,
or the next line when the rest is empty), or a ```python block that rewrites
whole functions: each def in it replaces the def of that name in the file
(what a small model writes when it copies the code back with a fix). Parsing never raises: a malformed
answer is an `Edit` with status "malformed" or "no_edit" and an error text.
`apply_edit` applies a parsed edit to a copy of the files: the search text
must occur exactly once (an exact match first, then line by line ignoring
indentation, re-indenting the replacement to the file).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import asdict, dataclass

_BLOCK = re.compile(r"<{5,}\s*SEARCH[ \t]*\n(.*?)\n?={5,}[ \t]*\n(.*?)\n?>{5,}\s*REPLACE", re.S)
_LINE = re.compile(r"replace line (\d+) with:?[ \t]*(.*)", re.I)
_PATH = re.compile(r"^[\w./-]+\.py$")
_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)


@dataclass
class Edit:
    status: str
    """ok (well-formed), malformed (markers present but broken), no_edit (nothing like an edit)."""
    path: str | None = None
    search: str = ""
    replace: str = ""
    line: int | None = None
    """Set for the `replace line N` form (search is then empty)."""
    kind: str = "search"
    """search (a SEARCH/REPLACE block), line (replace line N), functions (a block of whole defs)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)


def _path_before(text: str, start: int) -> str | None:
    """The file named on the last non-empty line before the SEARCH marker, if any."""
    for ln in reversed(text[:start].splitlines()):
        s = ln.strip().strip("`*").strip()
        if not s or s.lower() in ("edit", "python", "diff"):
            continue
        s = s.removeprefix("```edit").removeprefix("```").strip()
        s = re.sub(r"^(file|path)\s*:\s*", "", s, flags=re.I).strip("`'\" ")
        return s if _PATH.match(s) else None
    return None


def parse_edit(text: str) -> Edit:
    """The first edit in a completion. Never raises."""
    text = text or ""
    m = _BLOCK.search(text)
    if m:
        search, replace = m.group(1), m.group(2)
        if not search.strip():
            return Edit("malformed", _path_before(text, m.start()), search, replace,
                        error="the SEARCH part is empty")
        return Edit("ok", _path_before(text, m.start()), search, replace)
    lm = _LINE.search(text)
    if lm:
        rest = lm.group(2).rstrip()
        if not rest.strip():
            after = text[lm.end():].lstrip("\n").splitlines()
            rest = after[0].rstrip() if after else ""
        rest = rest.strip("`") if rest.strip().startswith("`") and rest.strip().endswith("`") else rest
        if not rest.strip():
            return Edit("malformed", line=int(lm.group(1)), error="replace line N with nothing", kind="line")
        return Edit("ok", line=int(lm.group(1)), replace=rest, kind="line")
    for cm in _CODE.finditer(text):
        if re.search(r"^\s*def \w+", cm.group(1), re.M):
            return Edit("ok", _path_before(text, cm.start()), replace=textwrap.dedent(cm.group(1)), kind="functions")
    if "SEARCH" in text or "REPLACE" in text or "<<<<" in text or "=======" in text:
        return Edit("malformed", error="SEARCH/REPLACE markers are incomplete (need <<<<<<< SEARCH, "
                                        "=======, >>>>>>> REPLACE)")
    return Edit("no_edit", error="no ```edit block with SEARCH/REPLACE markers")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _loose_find(lines: list[str], want: list[str]) -> list[int]:
    """Start indices where `want` matches `lines` ignoring leading/trailing whitespace."""
    key = [w.strip() for w in want]
    return [i for i in range(len(lines) - len(want) + 1)
            if [ln.strip() for ln in lines[i:i + len(want)]] == key]


def defs(source: str) -> dict[str, tuple[int, int, int]]:
    """{name: (first line, last line, column)} of every def (decorators included); {} if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            out.setdefault(node.name, (first, node.end_lineno, node.col_offset))
    return out


def _replace_functions(source: str, code: str) -> tuple[str | None, str | None]:
    mine = defs(code)
    while not mine and code.count("\ndef ") > 0:  # cut off mid-function: keep the whole ones before it
        code = code[:code.rindex("\ndef ") + 1]
        mine = defs(code)
    if not mine:
        return None, "the code block does not parse or defines no function"
    theirs = defs(source)
    names = [n for n in mine if n in theirs]
    if not names:
        return None, "the code block defines none of the file's functions"
    lines, block = source.splitlines(keepends=True), code.splitlines()  # (the kept part of the block)
    for name in sorted(names, key=lambda n: theirs[n][0], reverse=True):  # bottom up: spans stay valid
        a, b, col = theirs[name]
        ma, mb, mcol = mine[name]
        body = [(" " * col + ln[mcol:] if ln[:mcol].strip() == "" else ln) if ln.strip() else ""
                for ln in block[ma - 1:mb]]
        lines[a - 1:b] = [ln + "\n" for ln in body]
    return "".join(lines), None


def _replace_text(source: str, edit: Edit) -> tuple[str | None, str | None]:
    """(new source, error)."""
    if edit.kind == "functions":
        return _replace_functions(source, edit.replace)
    lines = source.splitlines(keepends=True)
    if edit.line is not None:
        if not 1 <= edit.line <= len(lines):
            return None, f"line {edit.line} is outside the file (1-{len(lines)})"
        old = lines[edit.line - 1]
        new = edit.replace.rstrip("\n")
        if not _indent(new) and _indent(old):
            new = _indent(old) + new.lstrip()
        lines[edit.line - 1] = new + ("\n" if old.endswith("\n") else "")
        return "".join(lines), None
    n = source.count(edit.search)
    if n > 1:
        return None, f"the SEARCH text occurs {n} times; include more lines to make it unique"
    if n == 1:
        return source.replace(edit.search, edit.replace, 1), None
    want = [w for w in edit.search.splitlines()]
    while want and not want[-1].strip():
        want.pop()
    plain = [ln.rstrip("\n") for ln in lines]
    starts = _loose_find(plain, want)
    if len(starts) > 1:
        return None, f"the SEARCH text occurs {len(starts)} times; include more lines to make it unique"
    if not starts:
        return None, "the SEARCH text is not in the file"
    i = starts[0]
    have, had = _indent(plain[i]), _indent(want[0])
    extra = have[len(had):] if have.startswith(had) else have
    repl = [extra + r if r.strip() else r for r in edit.replace.splitlines()]
    tail = "\n" if lines[i + len(want) - 1].endswith("\n") else ""
    return "".join(lines[:i]) + "\n".join(repl) + tail + "".join(lines[i + len(want):]), None


def apply_edit(files: dict[str, str], edit: Edit, default_path: str | None,
               allowed: list[str]) -> tuple[dict[str, str] | None, str, str | None]:
    """(new files, status, error). Status: applied, not_applied (the edit does
    not fit), unknown_file, no_file (level 1 edits must name their file), no_change."""
    path = edit.path or default_path
    if path is None and edit.kind == "functions":  # the file that defines the first function rewritten
        first = next(iter(defs(edit.replace)), None)
        owners = [p for p in allowed if first and first in defs(files[p])]
        path = owners[0] if len(owners) == 1 else None
    if path is None:
        return None, "no_file", "name the file to edit on the line before <<<<<<< SEARCH"
    if path not in allowed:
        return None, "unknown_file", f"{path} is not one of the files shown: {', '.join(allowed)}"
    new, err = _replace_text(files[path], edit)
    if err:
        return None, "not_applied", err
    if new == files[path]:
        return None, "no_change", "the edit changes nothing"
    return {**files, path: new}, "applied", None
