"""Unified diffs with syntax highlighting, built on difflib (not textual-diff-view)."""

from __future__ import annotations

import difflib

from textual.content import Content
from textual.highlight import highlight
from textual.widgets import Static

ADDED = "on $success-muted"
REMOVED = "on $error-muted"


def make_diff(old: str, new: str, old_name: str = "a", new_name: str = "b") -> str:
    """A unified diff of two texts (what the engine stores in `diff` columns)."""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), old_name, new_name))


def render_diff(diff: str, language: str = "python") -> Content:
    """Colour a unified diff: headers, hunks, and +/- lines with the code highlighted."""
    lines = diff.splitlines()
    if not lines:
        return Content.styled("(no change)", "$text-muted")
    is_code = [not (ln.startswith(("---", "+++", "@@")) and _is_header(i, lines)) for i, ln in enumerate(lines)]
    code = "\n".join(ln[1:] if ok else "" for ln, ok in zip(lines, is_code))
    code_lines = highlight(code, language=language).split("\n", allow_blank=True)
    out = []
    for line, ok, body in zip(lines, is_code, code_lines):
        if not ok:
            out.append(Content.styled(line, "bold $text-accent" if line.startswith("@@") else "bold"))
            continue
        mark = line[:1] or " "
        style = ADDED if mark == "+" else REMOVED if mark == "-" else ""
        row = Content.assemble(Content.styled(mark, "bold"), body)
        out.append(row.stylize_before(style) if style else row)
    return Content("\n").join(out)


def _is_header(i: int, lines: list[str]) -> bool:
    line = lines[i]
    if line.startswith("@@"):
        return True
    if line.startswith("---"):
        return i + 1 < len(lines) and lines[i + 1].startswith("+++")
    return i > 0 and lines[i - 1].startswith("---")


def diff_stats(diff: str) -> tuple[int, int]:
    """(lines added, lines removed) of a unified diff."""
    added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


class DiffView(Static):
    """A highlighted unified diff; `show(diff)` replaces it."""

    DEFAULT_CSS = """
    DiffView { width: auto; min-width: 100%; padding: 0 1; }
    """

    def show(self, diff: str, language: str = "python") -> None:
        self.update(render_diff(diff, language))
