"""Levels 0 and 1: one-line functions.

Level 0: one expression of one or two steps on an int, a string or a list
(arithmetic, slicing and case, aggregates, a boolean test). Level 1: one line
with a condition or a comprehension (branch on parity, filter and sum, map a
list, drop characters, clamp, words). Each family draws its constants, its
wording and its name from the seed; `key` holds only what changes the meaning.
"""

from __future__ import annotations

from typing import Callable

from .build import Draw, Spec, family

INT = (("n", "int"),)
STR = (("s", "str"),)
NUMS = (("nums", "list"),)


# Inputs are drawn lazily (thunks), after the spec's meaning: scanning families for their
# meanings (the held-out pools) then costs no input draws.
Inputs = Callable[[], tuple]


def _ints(d: Draw, k: int = 9, lo: int = -20, hi: int = 60) -> Inputs:
    return lambda: tuple((x,) for x in d.ints(k, lo, hi))


def _words(d: Draw, k: int = 9, plant: str = "") -> Inputs:
    """Words, some with `plant` inserted (so a letter test has both answers)."""
    return lambda: _planted(d, k, plant)


def _planted(d: Draw, k: int, plant: str) -> tuple:
    out = []
    for i in range(k):
        w = d.word()
        if plant and i % 2 == 0:
            at = d.int(0, len(w))
            w = w[:at] + plant + w[at:]
        out.append((w,))
    return tuple(out)


def _lists(d: Draw, k: int = 9, lo: int = -9, hi: int = 30) -> Inputs:
    return lambda: tuple((d.int_list(lo, hi),) for _ in range(k))


def _signed(b: int) -> tuple[str, str]:
    return ("add", str(b)) if b >= 0 else ("subtract", str(-b))


# ------------------------------------------------------------------ level 0


@family(0)
def affine(d: Draw) -> Spec:
    a, b, first = d.int(2, 15), d.int(-30, 30), d.pick(["multiply", "add"])
    verb, amount = _signed(b)
    if first == "multiply":
        doc = d.pick([f"Multiply n by {a}, then {verb} {amount}.", f"Return n times {a}, then {verb} {amount}."])
        body = f"return n * {a} + {b}" if b >= 0 else f"return n * {a} - {-b}"
    else:
        doc = d.pick([f"{verb.capitalize()} {amount} {'to' if b >= 0 else 'from'} n, then multiply the result by {a}.",
                      f"Return (n {'+' if b >= 0 else '-'} {abs(b)}) times {a}."])
        body = f"return (n + {b}) * {a}" if b >= 0 else f"return (n - {-b}) * {a}"
    return Spec(d.pick(["scale_shift", "transform", "apply_rule", "compute"]), INT, "int", doc, body, _ints(d),
                ("affine", first, a, b))


@family(0)
def remainder(d: Draw) -> Spec:
    a, b, op = d.int(2, 12), d.int(0, 30), d.pick(["%", "//"])
    what = "the remainder of n divided by" if op == "%" else "n divided by (integer division)"
    return Spec(d.pick(["divide_rule", "reduce_number", "bucket", "fold_number"]), INT, "int",
                f"Return {what} {a}, plus {b}.", f"return n {op} {a} + {b}", _ints(d, lo=0, hi=90),
                ("remainder", op, a, b))


@family(0)
def int_test(d: Draw) -> Spec:
    a, b, joint = d.int(2, 9), d.int(-10, 40), d.pick(["and", "or"])
    doc = f"Return True if n is divisible by {a} {joint} n is greater than {b}, else False."
    def inputs():
        return tuple((a * d.int(-3, 12) + (0 if i % 2 else d.int(1, a - 1)),) for i in range(12))
    return Spec(d.pick(["check_number", "is_special", "accept", "qualifies"]), INT, "bool", doc,
                f"return n % {a} == 0 {joint} n > {b}", inputs, ("int_test", a, b, joint))


@family(0)
def slice_case(d: Draw) -> Spec:
    k, part, suffix = d.int(1, 5), d.pick(["first", "last", "all but the first"]), d.pick(["", "!", "?", "_x", "42"])
    how = d.pick(["in upper case", "reversed", "with its first letter capitalised"])
    cut = {"first": f"s[:{k}]", "last": f"s[-{k}:]", "all but the first": f"s[{k}:]"}[part]
    call = {"in upper case": ".upper()", "reversed": "[::-1]", "with its first letter capitalised": ".capitalize()"}
    tail = f" followed by '{suffix}'" if suffix else ""
    doc = f"Return the {part} {k} characters of s, {how}{tail}."
    body = f"return {cut}{call[how]}" + (f" + '{suffix}'" if suffix else "")
    return Spec(d.pick(["shout_part", "clip", "cut_text", "headline"]), STR, "str", doc, body, _words(d),
                ("slice_case", k, part, suffix, how))


@family(0)
def list_aggregate(d: Draw) -> Spec:
    a = d.int(2, 20)
    doc, body = d.pick([
        (f"Return the largest number in nums minus the smallest number in nums, plus {a}.",
         f"return max(nums) - min(nums) + {a}"),
        (f"Return the sum of nums multiplied by {a}.", f"return sum(nums) * {a}"),
        (f"Return the largest number in nums plus {a}.", f"return max(nums) + {a}"),
        (f"Return the smallest number in nums times {a}.", f"return min(nums) * {a}"),
        (f"Return the number of items in nums plus {a}.", f"return len(nums) + {a}"),
        (f"Return the sum of nums minus {a}.", f"return sum(nums) - {a}"),
        (f"Return the largest number in nums times {a}.", f"return max(nums) * {a}"),
    ])
    return Spec(d.pick(["summarize", "aggregate", "score_list", "combine"]), NUMS, "int", doc, body, _lists(d),
                ("list_aggregate", body))


@family(0)
def repeat_join(d: Draw) -> Spec:
    a, sep = d.int(2, 6), d.pick(["-", ", ", "+", " ", "|", "/", "*", ":"])
    case = d.pick(["", "in upper case, ", "capitalised, "])
    call = {"": "", "in upper case, ": ".upper()", "capitalised, ": ".capitalize()"}[case]
    doc = f"Return s {case}repeated {a} times with '{sep}' between the copies."
    body = f"return '{sep}'.join([s{call}] * {a})"
    return Spec(d.pick(["echo", "repeat_text", "chant", "copy_join"]), STR, "str", doc, body, _words(d),
                ("repeat_join", a, sep, case))


@family(0)
def count_letter(d: Draw) -> Spec:
    c, extra = d.letter(), d.int(0, 9)
    plus = f", plus {extra}" if extra else ""
    doc = f"Return the number of times the letter '{c}' appears in s{plus}."
    body = f"return s.count('{c}')" + (f" + {extra}" if extra else "")
    return Spec(d.pick(["count_letter", "tally", "letter_score", "occurrences"]), STR, "int", doc, body,
                _words(d, 10, plant=c * d.int(1, 2)), ("count_letter", c, extra))


@family(0)
def replace_letter(d: Draw) -> Spec:
    x, y = d.letter(), d.pick(["*", "_", "#", "0", "z", "e"])
    doc = f"Return s with every '{x}' replaced by '{y}'."
    return Spec(d.pick(["swap_letter", "mask", "replace_char", "redact"]), STR, "str", doc,
                f"return s.replace('{x}', '{y}')", _words(d, 10, plant=x), ("replace_letter", x, y))


@family(0)
def pick_item(d: Draw) -> Spec:
    i, a = d.int(0, 2), d.int(2, 20)
    doc, body = d.pick([
        (f"Return the item at index {i} of nums multiplied by {a}.", f"return nums[{i}] * {a}"),
        (f"Return the first item of nums plus the last item of nums, plus {a}.", f"return nums[0] + nums[-1] + {a}"),
        (f"Return the last item of nums minus {a}.", f"return nums[-1] - {a}"),
    ])
    return Spec(d.pick(["pick", "select_item", "probe", "take"]), NUMS, "int", doc, body, _lists(d),
                ("pick_item", body))


@family(0)
def pair_math(d: Draw) -> Spec:
    k = d.int(1, 25)
    doc, body = d.pick([
        (f"Return the larger of a and b, multiplied by {k}.", f"return max(a, b) * {k}"),
        (f"Return the absolute difference between a and b, plus {k}.", f"return abs(a - b) + {k}"),
        (f"Return a times b, minus {k}.", f"return a * b - {k}"),
        (f"Return the smaller of a and b, plus {k}.", f"return min(a, b) + {k}"),
        (f"Return a plus b, then multiply the result by {k}.", f"return (a + b) * {k}"),
        (f"Return a minus b, then multiply the result by {k}.", f"return (a - b) * {k}"),
    ])
    def inputs():
        return tuple((d.int(-15, 40), d.int(-15, 40)) for _ in range(10))
    return Spec(d.pick(["combine_two", "pair_value", "mix", "merge_numbers"]), (("a", "int"), ("b", "int")),
                "int", doc, body, inputs, ("pair_math", body))


# ------------------------------------------------------------------ level 1


@family(1)
def parity_branch(d: Draw) -> Spec:
    a, b = d.int(2, 7), d.int(-9, 9)
    verb, amount = _signed(b)
    doc = f"If n is even, return n // 2. Otherwise return n times {a}, then {verb} {amount}."
    odd = f"n * {a} + {b}" if b >= 0 else f"n * {a} - {-b}"
    return Spec(d.pick(["step", "next_value", "hop", "advance"]), INT, "int", doc,
                f"return n // 2 if n % 2 == 0 else {odd}", _ints(d, 10, 0, 80), ("parity_branch", a, b))


@family(1)
def filter_sum(d: Draw) -> Spec:
    k, a = d.int(-5, 15), d.int(2, 5)
    doc, body = d.pick([
        (f"Return the sum of the numbers in nums that are greater than {k}.",
         f"return sum(x for x in nums if x > {k})"),
        (f"Return how many numbers in nums are divisible by {a}.", f"return sum(1 for x in nums if x % {a} == 0)"),
        (f"Return the sum of the numbers in nums that are less than {k}.", f"return sum(x for x in nums if x < {k})"),
        (f"Return how many numbers in nums are greater than {k}.", f"return sum(1 for x in nums if x > {k})"),
    ])
    return Spec(d.pick(["select_total", "filtered_sum", "count_some", "tally_list"]), NUMS, "int", doc, body,
                _lists(d, 10), ("filter_sum", body))


@family(1)
def map_list(d: Draw) -> Spec:
    a, b = d.int(2, 6), d.int(-9, 9)
    verb, amount = _signed(b)
    doc, body = d.pick([
        (f"Return a new list with each number in nums multiplied by {a}, then {verb} {amount}.",
         f"return [x * {a} + {b} for x in nums]"),
        ("Return a new list with the square of each number in nums.", "return [x * x for x in nums]"),
        (f"Return a new list with only the numbers in nums greater than {b}, in their order.",
         f"return [x for x in nums if x > {b}]"),
    ])
    return Spec(d.pick(["map_numbers", "rescale", "convert_all", "adjust_list"]), NUMS, "list", doc, body,
                _lists(d), ("map_list", body))


@family(1)
def drop_letters(d: Draw) -> Spec:
    c = d.letter()
    doc, body, plant = d.pick([
        ("Return s with every vowel (a, e, i, o, u) removed.",
         "return ''.join(ch for ch in s if ch not in 'aeiou')", ""),
        (f"Return s with every '{c}' removed, in upper case.", f"return s.replace('{c}', '').upper()", c),
        ("Return the number of vowels (a, e, i, o, u) in s.", "return sum(1 for ch in s if ch in 'aeiou')", ""),
    ])
    return Spec(d.pick(["strip_letters", "filter_text", "compress_word", "clean"]), STR, "str" if "join" in body
                or "upper" in body else "int", doc, body, _words(d, 10, plant=plant), ("drop_letters", body))


@family(1)
def clamp(d: Draw) -> Spec:
    lo = d.int(-10, 10)
    hi = lo + d.int(3, 25)
    doc = (f"Return n limited to the range from {lo} to {hi}: {lo} if n is below {lo}, "
           f"{hi} if n is above {hi}, otherwise n.")
    return Spec(d.pick(["clamp", "limit", "bound", "restrict"]), INT, "int", doc,
                f"return min(max(n, {lo}), {hi})", _ints(d, 10, lo - 15, hi + 15), ("clamp", lo, hi))


@family(1)
def word_ops(d: Draw) -> Spec:
    k, sep = d.int(2, 5), d.pick(["-", "_", "+", ", "])
    doc, body = d.pick([
        (f"Return the number of words in s that are longer than {k} letters.",
         f"return sum(1 for w in s.split() if len(w) > {k})"),
        (f"Return the words of s joined by '{sep}'.", f"return '{sep}'.join(s.split())"),
        ("Return the first letter of each word in s, joined into one string.",
         "return ''.join(w[0] for w in s.split())"),
    ])
    def inputs():
        return tuple((" ".join(d.words(d.int(2, 5))),) for _ in range(9))
    return Spec(d.pick(["words_info", "phrase_rule", "sentence_op", "wordplay"]), STR,
                "int" if "sum" in body else "str", doc, body, inputs, ("word_ops", body))


@family(1)
def all_any(d: Draw) -> Spec:
    k = d.int(-3, 12)
    doc, body = d.pick([
        (f"Return True if every number in nums is greater than {k}, else False.", f"return all(x > {k} for x in nums)"),
        (f"Return True if some number in nums equals {k}, else False.", f"return {k} in nums"),
        (f"Return True if no number in nums is below {k}, else False.", f"return all(x >= {k} for x in nums)"),
    ])
    def inputs():
        return tuple((d.int_list(k - 4 if i % 2 else k, k + 12, 3, 5),) for i in range(10))
    return Spec(d.pick(["all_good", "has_value", "test_list", "check_all"]), NUMS, "bool", doc, body, inputs,
                ("all_any", body))


@family(1)
def grade(d: Draw) -> Spec:
    lo = d.int(-5, 20)
    hi = lo + d.int(5, 30)
    doc = f"Return 'low' if n is less than {lo}, 'high' if n is greater than {hi}, otherwise 'mid'."
    body = f"return 'low' if n < {lo} else ('high' if n > {hi} else 'mid')"
    return Spec(d.pick(["grade", "classify", "band", "rate"]), INT, "str", doc, body,
                _ints(d, 10, lo - 20, hi + 20), ("grade", lo, hi))
