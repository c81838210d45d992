"""Bug-introducing mutations, found on the AST and applied to the source text.

A mutation replaces the text of one single-line expression with the unparsed
mutated expression, so the rest of the file (comments, layout) is untouched
and the fix is a one-line edit. Each candidate is checked by re-parsing: the
new file must parse to exactly the mutated tree (no precedence surprises).

Kinds: flip_compare (< to <=, == to !=, in to not in), swap_operator (+ to -,
* to //), swap_operands (a - b to b - a), off_by_one (n to n+1 / n-1),
flip_boolean (and to or), wrong_return (return x < y to return not x < y,
return a + b to return a), drop_negation (-x to x, not x to x), swap_call
(max to min).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import asdict, dataclass

COMPARE_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
OPERATOR_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                 ast.Div: ast.Mult, ast.Mod: ast.FloorDiv}
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod)
CALL_SWAP = {"max": "min", "min": "max", "any": "all", "all": "any"}


@dataclass(frozen=True)
class Mutation:
    path: str
    line: int
    col: int
    end_col: int
    old: str
    new: str
    kind: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Mutation":
        return cls(**d)

    def reverse(self) -> "Mutation":
        """The fix: put the old text back where the new text now stands."""
        return Mutation(self.path, self.line, self.col, self.col + len(self.new), self.new, self.old,
                        "fix_" + self.kind)


def _variants(node: ast.AST) -> list[tuple[str, ast.AST, ast.AST]]:
    """(kind, expression node to replace, replacement) for one AST node."""
    out = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE_FLIP:
        m = copy.deepcopy(node)
        m.ops = [COMPARE_FLIP[type(node.ops[0])]()]
        out.append(("flip_compare", node, m))
    elif isinstance(node, ast.BinOp):
        if type(node.op) in OPERATOR_SWAP:
            m = copy.deepcopy(node)
            m.op = OPERATOR_SWAP[type(node.op)]()
            out.append(("swap_operator", node, m))
        if isinstance(node.op, NON_COMMUTATIVE):
            m = copy.deepcopy(node)
            m.left, m.right = m.right, m.left
            out.append(("swap_operands", node, m))
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for delta in (1, -1):
            if node.value + delta >= 0 or node.value < 0:
                out.append(("off_by_one", node, ast.Constant(node.value + delta)))
    elif isinstance(node, ast.BoolOp):
        m = copy.deepcopy(node)
        m.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("flip_boolean", node, m))
    elif isinstance(node, ast.Return) and node.value is not None:
        v = node.value
        if isinstance(v, (ast.Compare, ast.BoolOp)):
            out.append(("wrong_return", v, ast.UnaryOp(ast.Not(), copy.deepcopy(v))))
        elif isinstance(v, ast.BinOp):
            out.append(("wrong_return", v, copy.deepcopy(v.left)))
        elif isinstance(v, ast.Constant) and isinstance(v.value, bool):
            out.append(("wrong_return", v, ast.Constant(not v.value)))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        out.append(("drop_negation", node, copy.deepcopy(node.operand)))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALL_SWAP:
        out.append(("swap_call", node.func, ast.Name(CALL_SWAP[node.func.id], ast.Load())))
    return out


def _replace_in(tree: ast.AST, target: ast.AST, new: ast.AST) -> bool:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, new)
                return True
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if v is target:
                        value[i] = new
                        return True
    return False


def candidates(path: str, source: str) -> list[Mutation]:
    """Every verified single mutation of one file, in a fixed order."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out = []
    nodes = list(ast.walk(tree))
    position = {id(n): i for i, n in enumerate(nodes)}
    for node in nodes:
        for kind, expr, repl in _variants(node):
            if getattr(expr, "lineno", None) is None or expr.lineno != expr.end_lineno:
                continue
            line = lines[expr.lineno - 1]
            old = line[expr.col_offset:expr.end_col_offset]
            new = ast.unparse(repl)
            if old == new or not line.isascii():
                continue
            mutated_line = line[:expr.col_offset] + new + line[expr.end_col_offset:]
            new_source = "".join(lines[:expr.lineno - 1] + [mutated_line] + lines[expr.lineno:])
            expected = copy.deepcopy(tree)
            target = list(ast.walk(expected))[position[id(expr)]]  # same walk order in the copy
            if not _replace_in(expected, target, copy.deepcopy(repl)):
                continue
            try:
                if ast.dump(ast.parse(new_source)) != ast.dump(expected):
                    continue
            except SyntaxError:
                continue
            out.append(Mutation(path, expr.lineno, expr.col_offset, expr.end_col_offset, old, new, kind))
    return out


def apply(files: dict[str, str], mutations: list[Mutation]) -> dict[str, str]:
    """A copy of `files` with the mutations applied (right to left on a line,
    so earlier columns stay valid). Raises ValueError if one does not fit."""
    out = dict(files)
    for m in sorted(mutations, key=lambda m: (m.path, m.line, m.col), reverse=True):
        lines = out[m.path].splitlines(keepends=True)
        line = lines[m.line - 1]
        if line[m.col:m.end_col] != m.old:
            raise ValueError(f"mutation does not fit {m.path}:{m.line}: expected {m.old!r}")
        lines[m.line - 1] = line[:m.col] + m.new + line[m.end_col:]
        out[m.path] = "".join(lines)
    return out
