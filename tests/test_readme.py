"""The README is the manual: what it names must exist.

Its relative links (and those of the pages under docs/ it leads to) resolve to files, and
their anchors to headings; every `evotui COMMAND` it shows is a command of the CLI, with
options that command takes; every `make TARGET` is a Makefile target; the config table's
keys and defaults are RunConfig's, and docs/config.md lists every RunConfig key.

    .venv/bin/python tests/test_readme.py      # rewrite docs/config.md from backend/config.py
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONFIG_DOC = ROOT / "docs" / "config.md"
CHECKED_PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "measurements").glob("*.md")),
                 ROOT / "docs" / "results" / "README.md", ROOT / "docs" / "results" / "comparisons.md"]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
EVOTUI = re.compile(r"(?<![\w-])evotui[ \t]+([a-z][a-z|-]*)")
MAKE = re.compile(r"(?<![\w-])make[ \t]+([a-z][a-z-]*)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def code_segments(text: str) -> list[str]:
    """Fenced blocks line by line, then inline code spans outside them."""
    lines = [ln for block in FENCE.findall(text) for ln in block.splitlines()]
    return lines + INLINE.findall(FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    bad = []
    for a, b in LINK.findall(page.read_text()):
        target = a or b
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '#{anchor}' in {dest.name}")
    return bad


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert page.exists()
    assert broken_links(page) == []


def cli_help(*argv: str) -> str:
    """`evotui ARGV --help` in this process (the CLI never imports torch, so this is quick)."""
    from evotui.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def named_commands(text: str) -> dict[str, set[str]]:
    """{command: options shown after it} for every `evotui COMMAND ...` in the README's code."""
    named: dict[str, set[str]] = {}
    for seg in code_segments(text):
        seg = seg.split(" #")[0]
        hits = list(EVOTUI.finditer(seg))
        for i, m in enumerate(hits):
            rest = seg[m.end():hits[i + 1].start() if i + 1 < len(hits) else len(seg)].split("|")[0]
            for cmd in m.group(1).split("|"):
                named.setdefault(cmd, set()).update(OPTION.findall(rest))
    return named


def test_readme_commands_are_cli_commands():
    top = cli_help()
    listed = set(re.search(r"\{([a-z,-]+)\}", top).group(1).split(","))
    named = named_commands(README.read_text())
    assert {"run", "open", "compare", "report", "export"} <= set(named)  # the manual covers them
    assert set(named) - listed == set(), f"`evotui --help` lists {sorted(listed)}"


def test_readme_command_options_exist():
    missing = {}
    for cmd, options in named_commands(README.read_text()).items():
        if cmd == "bench":
            continue  # bench passes its own flags on to the benchmark
        known = set(OPTION.findall(cli_help(cmd)))
        if options - known:
            missing[cmd] = sorted(options - known)
    assert missing == {}


def test_readme_make_targets_exist():
    targets = set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))
    named = {t for seg in code_segments(README.read_text()) for t in MAKE.findall(seg)}
    assert {"run", "test"} <= named
    assert named - targets == set()


def test_the_checks_catch_what_they_guard(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[a](missing.md) [b](#nope) [c](page.md#a-title) [d](#a-title)\n")
    assert broken_links(page) == ["missing.md: no such file", "#nope: no heading '#nope' in page.md"]
    assert named_commands("`.venv/bin/evotui frob --x` and\n```\nevotui a|b RUN --y  # --z\n```\n") == {
        "frob": {"--x"}, "a": {"--y"}, "b": {"--y"}}
    assert check_rows([("train.nope", "1"), ("train.lr", "1e-4"), ("steps", "20")]) == [
        "train.nope: not a RunConfig key", "train.lr: the table says 1e-4, RunConfig's default is 2e-05"]


# ---------------------------------------------------------------- the config table


def config_keys() -> dict[str, object]:
    """Every RunConfig key, dotted, with its default."""
    from backend.config import RunConfig

    def walk(obj, prefix: str):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from walk(value, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}", value

    return dict(walk(RunConfig(), ""))


def table_rows(text: str, marker: str) -> list[tuple[str, str]]:
    """(key, default) of each row of the table after `marker`: first two cells, backticks off."""
    rows = []
    for line in text[text.index(marker):].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if cells[0] not in ("key", "---") and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], cells[1]))
    return rows


def check_rows(rows: list[tuple[str, str]]) -> list[str]:
    keys = config_keys()
    bad = []
    for key, default in rows:
        if key not in keys:
            bad.append(f"{key}: not a RunConfig key")
        elif tomllib.loads(f"v = {default}")["v"] != keys[key]:
            bad.append(f"{key}: the table says {default}, RunConfig's default is {keys[key]!r}")
    return bad


def test_readme_config_table_matches_runconfig():
    rows = table_rows(README.read_text(), "<!-- config-table")
    assert len(rows) >= 20
    assert check_rows(rows) == []


def test_config_reference_lists_every_key():
    rows = table_rows(CONFIG_DOC.read_text(), "<!-- config-reference")
    assert check_rows(rows) == []
    missing = set(config_keys()) - {k for k, _ in rows}
    assert not missing, f"not in docs/config.md: {sorted(missing)}; run `.venv/bin/python tests/test_readme.py`"


def field_docs() -> dict[str, dict[str, str]]:
    """{class name: {field: docstring}} read from backend/config.py (the string after a field)."""
    tree = ast.parse((ROOT / "backend" / "config.py").read_text())
    docs: dict[str, dict[str, str]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body, fields = cls.body, {}
        for node, after in zip(body, [*body[1:], None], strict=True):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                fields[node.target.id] = " ".join(after.value.value.split()) if is_doc else ""
        docs[cls.name] = fields
    return docs


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list)):
        return json.dumps(value)
    return repr(value)


def render_config_doc() -> str:
    """docs/config.md: every RunConfig key with its default and its field docstring."""
    from backend.config import RunConfig

    docs = field_docs()
    out = ["# Every config key", "",
           "Generated from the field docstrings of `backend/config.py` by `.venv/bin/python tests/test_readme.py`;",
           "`tests/test_readme.py` checks that every key is here with its default. Set a key in a TOML file",
           "(`--config`) or with `--set key=value`; a profile (`--profile cpu|gpu|gpu-fast`) fills the keys you",
           "leave unset.",
           "", "<!-- config-reference: generated; keys and defaults checked by tests/test_readme.py -->",
           "| key | default | meaning |", "|---|---|---|"]

    def walk(obj, prefix: str):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from walk(value, f"{prefix}{f.name}.")
            else:
                doc = docs.get(type(obj).__name__, {}).get(f.name, "").replace("|", "\\|")
                yield f"| `{prefix}{f.name}` | `{toml_value(value)}` | {doc} |"

    out += list(walk(RunConfig(), ""))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    CONFIG_DOC.write_text(render_config_doc())
    print(f"wrote {CONFIG_DOC.relative_to(ROOT)}")
