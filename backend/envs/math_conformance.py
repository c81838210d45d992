"""Conformance of the math evaluator with reasoning-gym's own scorer.

For each dataset the product offers (config default, README, docs) it builds
reasoning-gym entries and, per entry, completions of many kinds (bare, tagged,
separators, LaTeX, hedges, expression echoes, ...). Each case has an expected
verdict from an oracle that does not use the evaluator's code: the value the
case means to give, in the dataset's own format, scored by reasoning-gym's
`score_answer` at full score; cases that give several answers or an
unevaluated expression are expected wrong whatever their values. The
evaluator (`math_answer.check`, through the task a `MathEnv` builds) must
never say correct where the oracle does not (a false positive); where it says
wrong but the oracle says correct (a false negative), the kind must be listed
in tests/test_math_conformance.py.

    python -m backend.envs.math_conformance            # the Markdown tables (docs/evaluator.md)
    python -m backend.envs.math_conformance --n 50     # more entries per dataset
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from decimal import Decimal, localcontext

from . import math_answer
from .math import LEVELS, MathEnv

DATASETS = ["basic_arithmetic", "chain_sum", "products", "fraction_simplification", "decimal_arithmetic",
            "number_format", "decimal_chain_sum", "gcd", "lcm", "leg_counting"]
"""The defaults (basic_arithmetic, chain_sum), those the README names, and four more numeric ones."""
SEED = 4242
_EXPR = re.compile(r"[-(]*\s*\d[\d.]*(?:\s*[)]*\s*[-+*/]\s*[(\s-]*\d[\d.]*\s*[)]*)+")
_QNUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]\d+)?")


@dataclass
class Case:
    dataset: str
    kind: str
    task_id: str
    completion: str
    expected: bool
    got: bool
    got_builtin: bool
    status: str

    @property
    def false_positive(self) -> bool:
        return self.got and not self.expected

    @property
    def false_negative(self) -> bool:
        return self.expected and not self.got


def _fmt(d: Decimal) -> str:
    return str(int(d)) if d == d.to_integral_value() else format(d.normalize(), "f")


def _values(dataset: str, entry: dict) -> tuple[str, str]:
    """(right, wrong) values in the dataset's own plain format."""
    meta = entry["metadata"]
    if dataset == "fraction_simplification":
        n, d = meta["simplified_numerator"], meta["simplified_denominator"]
        return f"{n}/{d}", f"{n + 1}/{d}"
    if dataset == "number_format":
        right = Decimal(f"{meta['solution']:.3f}")
        return _fmt(right), _fmt(right + 5)
    right = Decimal(entry["answer"])
    return entry["answer"], _fmt(right + 1)


def _commas(v: str) -> str:
    if "/" in v:
        return "/".join(_commas(p) for p in v.split("/"))
    sign, rest = ("-", v[1:]) if v.startswith("-") else ("", v)
    whole, _, frac = rest.partition(".")
    return sign + f"{int(whole):,}" + (f".{frac}" if frac else "")


def _echo(dataset: str, question: str, entry: dict) -> str | None:
    """The question's expression (or copied fraction), as a policy would paste it."""
    if dataset == "fraction_simplification":
        m = entry["metadata"]
        copied = f"{m['numerator']}/{m['denominator']}"
        return None if m["numerator"] == m["simplified_numerator"] else copied
    found = [m.group(0).strip() for m in _EXPR.finditer(question)]
    return max(found, key=len) if found else None


def kinds(dataset: str, question: str, entry: dict) -> list[tuple[str, str, str | None]]:
    """(kind, completion, intended value or None = must be wrong) for one entry."""
    r, w = _values(dataset, entry)
    frac = "/" in r
    out = [
        ("bare", r, r), ("bare_sentence", f"Adding up step by step.\nThe answer is {r}.", r),
        ("tagged", f"Let me compute.\n<answer>{r}</answer>", r), ("tagged_wrong", f"<answer>{w}</answer>", w),
        ("bare_wrong", f"The answer is {w}.", w),
        ("trailing_text_tagged", f"<answer>{r}</answer>\nCheck: 3 + 4 = 7, done.", r),
        ("trailing_text_bare", f"The answer is {r}. Check: 3 + 4 = 7.", r),
        ("latex_inline", f"The answer is ${r}$.", r), ("latex_boxed", f"So the final answer is $\\boxed{{{r}}}$", r),
        ("markdown_bold", f"**Answer:** **{r}**", r),
        ("hedge_or_right_last", f"<answer>{w} or {r}</answer>", None),
        ("hedge_or_right_first", f"<answer>{r} or {w}</answer>", None),
        ("hedge_prose", f"I think {w} but maybe {r}", None), ("hedge_list", f"<answer>{r}, {w}</answer>", None),
        ("tags_wrong_then_right", f"<answer>{w}</answer>\nWait, let me redo it.\n<answer>{r}</answer>", None),
        ("tags_right_then_wrong", f"<answer>{r}</answer>\nWait, let me redo it.\n<answer>{w}</answer>", None),
        ("cues_wrong_then_right", f"The answer is {w}. Actually, the answer is {r}.", None),
        ("cues_right_then_wrong", f"The answer is {r}. Actually, the answer is {w}.", None),
        ("cue_then_tag_wrong_then_right", f"The answer is {w}. No: <answer>{r}</answer>", None),
        ("working_wrong_then_maybe_right", f"Adding them up, the total = {w}.\nOr maybe the answer is {r}.", None),
        ("working_right_then_maybe_same", f"Adding them up, the total = {r}.\nSo maybe the answer is {r}.", r),
        ("lines_wrong_then_right", f"{w}\n{r}", None), ("empty", "", None), ("empty_tag", "<answer></answer>", None),
        ("tag_self_correction", f"<answer>{w}, no, {r}</answer>", None),
        ("boxed_wrong_then_right", f"$\\boxed{{{w}}}$, hmm, no: $\\boxed{{{r}}}$", None),
        # deliberately strict (accepted false negatives, see docs/evaluator.md): words or working
        # around the value, or a bare sentence without an answer cue
        ("tag_with_words", f"<answer>{r} in total</answer>", r),
        ("answer_with_reason", f"The answer is {r} because I added them.", r),
        ("prose_last_line", f"So it is {r}", r),
    ]
    if _commas(r) != r:
        out += [("thousands_tagged", f"<answer>{_commas(r)}</answer>", r),
                ("thousands_bare", f"The answer is {_commas(r)}.", r)]
    if frac:
        a, b = r.split("/")
        out += [("latex_frac_bare", f"Simplifying gives\n$\\frac{{{a}}}{{{b}}}$", r),
                ("fraction_spaces", f"<answer>{a} / {b}</answer>", r),
                ("decimal_approx", f"<answer>{int(a) / int(b):.6f}</answer>", f"{int(a) / int(b):.6f}")]
    else:
        d = Decimal(r)
        sci = f"{float(r):.15e}" if dataset == "number_format" else format(d.normalize(), "e")
        out.append(("scientific", f"<answer>{sci}</answer>", sci if dataset == "number_format" else r))
        rounded = format(d, ".1e")
        out.append(("scientific_rounded", f"<answer>{rounded}</answer>", _fmt(Decimal(rounded))))
        out.append(("unevaluated_sum", f"<answer>{_fmt(d - 1)} + 1</answer>", None))
        if d == d.to_integral_value() and "." not in r:
            out.append(("dot_zero", f"<answer>{r}.0</answer>", r))
        if d < 0:
            out += [("unicode_minus", f"<answer>\u2212{r[1:]}</answer>", r),
                    ("spaced_minus", f"The answer is - {r[1:]}.", r)]
    echo = _echo(dataset, question, entry)
    if echo:
        out += [("expression_echo_tagged", f"<answer>{echo}</answer>", None),
                ("expression_echo_bare", f"The answer is {echo}.", None),
                ("equation_bare", f"{echo} = {r}", r),
                ("tag_with_equation", f"<answer>{echo} = {r}</answer>", r)]
    if dataset in ("decimal_arithmetic", "number_format"):
        near, far = (_fmt(Decimal(r) + Decimal(x)) for x in ("0.0004", "0.02"))
        out += [("within_tolerance", f"<answer>{near}</answer>", near),
                ("outside_tolerance", f"<answer>{far}</answer>", far)]
    copied = [n for n in _QNUM.findall(question) if n.replace(",", "") not in (r, w)]
    if copied:
        out.append(("copied_number", f"<answer>{copied[0]}</answer>", copied[0]))
    return out


def _oracle(ds, entry: dict, intended: str | None) -> bool:
    return intended is not None and ds.score_answer(intended, entry) >= 1.0


def run(datasets: list[str] | None = None, n: int = 30) -> list[Case]:
    """Every case for `n` entries per dataset (half at level 1, half at the top level where there are levels)."""
    import reasoning_gym

    env = MathEnv(datasets or DATASETS)
    cases = []
    for name in env.datasets:
        top = len(LEVELS.get(name, [{}])) - 1
        for level, count in (((1, n - n // 2), (top, n // 2)) if top > 1 else ((top, n),)):
            for task in env._make(name, level, SEED + level, count):
                i = int(task.id.rsplit(":", 1)[1])
                with localcontext(math_answer.EXACT):  # the generator's decimal context stays inside
                    ds = reasoning_gym.create_dataset(name, seed=SEED + level, size=count, **task.meta["rg_config"])
                    entry = ds[i]
                    completions = kinds(name, task.question, entry)
                for kind, completion, intended in completions:
                    got, _, status = math_answer.check(name, task.question, task.answer, completion, task.meta)
                    builtin = math_answer.check(name, task.question, task.answer, completion, task.meta,
                                                library=False)[0]
                    cases.append(Case(name, kind, task.id, completion, _oracle(ds, entry, intended), got,
                                      builtin, status))
    return cases


def summary(cases: list[Case]) -> list[dict]:
    """Per dataset: cases, expected correct, evaluator correct, false positives, false-negative kinds."""
    rows: dict[str, dict] = {}
    for c in cases:
        row = rows.setdefault(c.dataset, {"dataset": c.dataset, "cases": 0, "expected": 0, "correct": 0,
                                          "false_positives": 0, "false_negatives": {}})
        row["cases"] += 1
        row["expected"] += c.expected
        row["correct"] += c.got
        row["false_positives"] += c.false_positive
        if c.false_negative:
            row["false_negatives"][c.kind] = row["false_negatives"].get(c.kind, 0) + 1
    return list(rows.values())


def markdown(cases: list[Case]) -> str:
    """The two tables of docs/evaluator.md: per dataset, and per kind (with a chain_sum example)."""
    out = ["| dataset | cases | expected correct | judged correct | false positives | false negatives (kind: n) |",
           "|---|---|---|---|---|---|"]
    for s in summary(cases):
        fn = ", ".join(f"{k}: {v}" for k, v in sorted(s["false_negatives"].items())) or "none"
        out.append(f"| {s['dataset']} | {s['cases']} | {s['expected']} | {s['correct']} | "
                   f"{s['false_positives']} | {fn} |")
    out += ["", "| kind | example (first chain_sum entry) | expected | cases | judged correct | FP | FN |",
            "|---|---|---|---|---|---|---|"]
    by_kind: dict[str, list[Case]] = {}
    for c in cases:
        by_kind.setdefault(c.kind, []).append(c)
    for kind, cs in by_kind.items():
        ex = next((c for c in cs if c.dataset == "chain_sum"), cs[0])
        text = ex.completion.replace("\n", "\\n").replace("|", "\\|")[:70] or "(empty)"
        expected = sum(c.expected for c in cs)
        exp = "correct" if expected == len(cs) else "wrong" if not expected else f"{expected}/{len(cs)} correct"
        out.append(f"| {kind} | `{text}` | {exp} | {len(cs)} | {sum(c.got for c in cs)} | "
                   f"{sum(c.false_positive for c in cs)} | {sum(c.false_negative for c in cs)} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m backend.envs.math_conformance", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=30, help="entries per dataset (default 30)")
    args = p.parse_args(argv)
    cases = run(n=args.n)
    print(markdown(cases))
    return 1 if any(c.false_positive for c in cases) else 0


if __name__ == "__main__":
    raise SystemExit(main())
