"""Single-factor AST edits of harness files, diffs, and applying foreign diffs."""

import pytest

from backend.evolve.edit import (Edit, EditError, add_definition, apply_unified_diff, changed_names, constant,
                                 definition, remove_name, replace_name, set_constant, set_definition, top_level,
                                 unified_diff)
from backend.harness.loader import Harness, default_harness_path

CODE = '''"""doc"""
import re

A = {"x": 1.0, "y": 0.1}

# a comment that stays


def f(r):
    return 1


def g(r):
    return 2
'''


def test_top_level_spans_and_definition():
    spans = top_level(CODE)
    assert set(spans) == {"A", "f", "g"}
    assert definition(CODE, "f") == "def f(r):\n    return 1"


def test_replace_constant_keeps_everything_else():
    new = set_constant(CODE, "A", {"x": 1.0, "y": 0.5})
    assert constant(new, "A") == {"x": 1.0, "y": 0.5}
    assert changed_names(CODE, new) == ["A"]
    assert "# a comment that stays" in new
    diff = unified_diff(CODE, new)
    body = diff.splitlines()[2:]  # past the ---/+++ header
    assert [ln for ln in body if ln[:1] in "+-"] == ['-A = {"x": 1.0, "y": 0.1}', '+A = {"x": 1.0, "y": 0.5}']


def test_replace_add_remove_function():
    new = replace_name(CODE, "f", "def f(r):\n    return 3\n")
    assert changed_names(CODE, new) == ["f"]
    added = add_definition(CODE, "def h(r):\n    return 4\n")
    assert changed_names(CODE, added) == ["h"] and added.endswith("return 4\n")
    removed = remove_name(CODE, "g")
    assert changed_names(CODE, removed) == ["g"] and "def g" not in removed
    assert set_definition(CODE, "f", "") == remove_name(CODE, "f")


@pytest.mark.parametrize("call, match", [
    (lambda: replace_name(CODE, "nope", "nope = 1"), "no top-level 'nope'"),
    (lambda: replace_name(CODE, "f", "def g(r):\n    return 1"), "defines 'g', expected 'f'"),
    (lambda: replace_name(CODE, "f", "def f(r):\n  return (("), "does not parse"),
    (lambda: add_definition(CODE, "def f(r):\n    return 0"), "already defines 'f'"),
    (lambda: add_definition(CODE, "a = 1\nb = 2"), "exactly one"),
    (lambda: Edit("rename", "f").apply(CODE), "unknown edit op"),
])
def test_edit_errors(call, match):
    with pytest.raises(EditError, match=match):
        call()


def test_formatting_only_changes_are_not_changes():
    assert changed_names(CODE, CODE.replace("return 1", "return (1)")) == []


def test_apply_own_diff_roundtrip_on_default_harness():
    code = default_harness_path("math").read_text()
    new = replace_name(code, "extract_answer",
                       "def extract_answer(r):\n    t = answer_tag(r.completion)\n"
                       "    return t if t is not None else last_number(r.completion)\n")
    diff = unified_diff(code, new)
    assert apply_unified_diff(code, diff) == new
    Harness.from_code(new)  # still a valid harness


def test_apply_diff_with_wrong_line_numbers_and_bad_hunks():
    diff = "--- a\n+++ b\n@@ -1,2 +1,2 @@\n def f(r):\n-    return 1\n+    return 5\n"
    assert "return 5" in apply_unified_diff(CODE, diff)  # hunk found although it claims line 1
    with pytest.raises(EditError, match="hunk 1 does not apply"):
        apply_unified_diff(CODE, "@@ -1,1 +1,1 @@\n-nothing like this\n+x\n")
    with pytest.raises(EditError, match="no hunks"):
        apply_unified_diff(CODE, "just prose")
