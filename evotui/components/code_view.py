"""Syntax-highlighted code with line numbers (Textual's pygments highlighter, so themes apply)."""

from __future__ import annotations

from textual.content import Content
from textual.highlight import highlight
from textual.widgets import Static


def highlighted(code: str, language: str = "python", line_numbers: bool = True) -> Content:
    """Code as Content, highlighted in one pass, optionally with a line-number gutter."""
    body = highlight(code, language=language) if code else Content("")
    if not line_numbers:
        return body
    lines = body.split("\n", allow_blank=True)
    width = len(str(len(lines)))
    return Content("\n").join(
        Content.assemble(Content.styled(f"{i:>{width}} ", "$text-muted"), line) for i, line in enumerate(lines, 1))


def language_for(domain: str | None, text: str) -> str:
    """Python for code-like domains and text that looks like a function; plain text otherwise."""
    if domain == "code" or text.lstrip().startswith(("def ", "import ", "from ", "class ")):
        return "python"
    return "text"


class CodeView(Static):
    """Highlighted code; `show(code)` replaces it."""

    DEFAULT_CSS = """
    CodeView { width: auto; min-width: 100%; padding: 0 1; }
    """

    def show(self, code: str, language: str = "python", line_numbers: bool = True) -> None:
        self.update(highlighted(code, language, line_numbers))
