"""Levels 2 and 3: small loops, then string and list processing.

Level 2: a loop with one accumulator (digits, running sums, repeated
division, building a string, counting pairs, multiples below n). Level 3: a
few steps of state (run-length encoding, order-keeping dedupe, a Caesar shift,
the second largest value, the most frequent word, rotation, chunk sums, the
longest run).
"""

from __future__ import annotations

from .build import Draw, Spec, family
from .families_basic import INT, NUMS, STR, _lists, _words

# ------------------------------------------------------------------ level 2


@family(2)
def digits(d: Draw) -> Spec:
    dig, a = d.int(0, 9), d.int(2, 5)
    doc, body = d.pick([
        ("Return the sum of the digits of n (n is not negative).",
         "total = 0\nwhile n > 0:\n    total += n % 10\n    n //= 10\nreturn total"),
        ("Return the product of the digits of n (n is positive).",
         "prod = 1\nfor ch in str(n):\n    prod *= int(ch)\nreturn prod"),
        (f"Return how many digits of n are equal to {dig} (n is not negative).", f"return str(n).count('{dig}')"),
        (f"Return the sum of the digits of n times {a} (n is not negative).",
         f"return sum(int(ch) for ch in str(n)) * {a}"),
    ])
    def inputs():
        return tuple((d.int(1, 10 ** d.int(2, 5)),) for _ in range(10))
    return Spec(d.pick(["digit_rule", "digits_of", "number_digits", "digit_math"]), INT, "int", doc, body, inputs,
                ("digits", body))


@family(2)
def running(d: Draw) -> Spec:
    doc, body = d.pick([
        ("Return the list of running totals of nums: item i is the sum of nums[0] .. nums[i].",
         "out, total = [], 0\nfor x in nums:\n    total += x\n    out.append(total)\nreturn out"),
        ("Return the list of differences between each item of nums and the item before it.",
         "return [nums[i] - nums[i - 1] for i in range(1, len(nums))]"),
        ("Return the list of running maxima of nums: item i is the largest of nums[0] .. nums[i].",
         "out = []\nfor x in nums:\n    out.append(x if not out else max(out[-1], x))\nreturn out"),
    ])
    return Spec(d.pick(["running", "accumulate", "prefix_values", "track"]), NUMS, "list", doc, body, _lists(d),
                ("running", body))


@family(2)
def divide_steps(d: Draw) -> Spec:
    a = d.int(2, 5)
    doc = f"Return how many times n can be divided by {a} with integer division before it becomes less than {a}."
    body = f"steps = 0\nwhile n >= {a}:\n    n //= {a}\n    steps += 1\nreturn steps"
    def inputs():
        return tuple((d.int(0, 3000),) for _ in range(10))
    return Spec(d.pick(["count_steps", "halvings", "shrink_count", "levels"]), INT, "int", doc, body, inputs,
                ("divide_steps", a))


@family(2)
def build_string(d: Draw) -> Spec:
    k, sep = d.int(2, 3), d.pick(["-", "*", "."])
    doc, body = d.pick([
        (f"Return s with every character repeated {k} times.", f"return ''.join(ch * {k} for ch in s)"),
        ("Return s with the characters at even indexes (0, 2, ...) in upper case and the others as they are.",
         "return ''.join(ch.upper() if i % 2 == 0 else ch for i, ch in enumerate(s))"),
        (f"Return the characters of s with '{sep}' between each pair of neighbours.", f"return '{sep}'.join(s)"),
    ])
    return Spec(d.pick(["stretch", "decorate", "weave", "pattern"]), STR, "str", doc, body, _words(d),
                ("build_string", body))


@family(2)
def count_pairs(d: Draw) -> Spec:
    t = d.int(5, 20)
    doc, body = d.pick([
        ("Return how many items of nums are larger than the item just before them.",
         "return sum(1 for i in range(1, len(nums)) if nums[i] > nums[i - 1])"),
        (f"Return how many pairs of positions i < j have nums[i] + nums[j] == {t}.",
         f"count = 0\nfor i in range(len(nums)):\n    for j in range(i + 1, len(nums)):\n"
         f"        if nums[i] + nums[j] == {t}:\n            count += 1\nreturn count"),
        ("Return how many neighbouring items of nums are equal.",
         "return sum(1 for i in range(1, len(nums)) if nums[i] == nums[i - 1])"),
    ])
    def inputs():
        return tuple((d.int_list(0, t, 4, 8),) for _ in range(10))
    return Spec(d.pick(["count_pairs", "pair_count", "rises", "matches"]), NUMS, "int", doc, body, inputs,
                ("count_pairs", body))


@family(2)
def multiples(d: Draw) -> Spec:
    a, b = d.ints(2, 2, 9)
    doc = f"Return the sum of the positive numbers below n that are divisible by {a} or by {b}."
    body = f"return sum(x for x in range(1, n) if x % {a} == 0 or x % {b} == 0)"
    return Spec(d.pick(["sum_multiples", "multiples_total", "add_multiples"]), INT, "int", doc, body,
                lambda: tuple((x,) for x in d.ints(10, 1, 60)), ("multiples", min(a, b), max(a, b)))


# ------------------------------------------------------------------ level 3


@family(3)
def run_length(d: Draw) -> Spec:
    sep, count_first = d.pick(["", "-", ":"]), d.pick([True, False])
    piece = f"str(j - i) + '{sep}' + s[i]" if count_first else f"s[i] + '{sep}' + str(j - i)"
    order = "the run's length, then '{sep}', then the character" if count_first else \
        "the character, then '{sep}', then the run's length"
    doc = "Return the run-length encoding of s: for each run of one repeated character, " + order.format(sep=sep) + "."
    body = ("out, i = '', 0\nwhile i < len(s):\n    j = i\n    while j < len(s) and s[j] == s[i]:\n        j += 1\n"
            f"    out += {piece}\n    i = j\nreturn out")
    def inputs():
        return tuple(("".join(d.pick("abcx") * d.int(1, 3) for _ in range(d.int(1, 5))),) for _ in range(10))
    return Spec(d.pick(["encode_runs", "rle", "compress"]), STR, "str", doc, body, inputs,
                ("run_length", sep, count_first))


@family(3)
def dedupe(d: Draw) -> Spec:
    doc, body = d.pick([
        ("Return nums without repeated values, keeping the first time each value appears.",
         "seen, out = set(), []\nfor x in nums:\n    if x not in seen:\n        seen.add(x)\n        out.append(x)\n"
         "return out"),
        ("Return the values that appear more than once in nums, each once, in order of first appearance.",
         "out = []\nfor x in nums:\n    if nums.count(x) > 1 and x not in out:\n        out.append(x)\nreturn out"),
    ])
    return Spec(d.pick(["unique", "dedupe", "distinct_values", "repeats"]), NUMS, "list", doc, body,
                _lists(d, 10, 0, 6), ("dedupe", body))


@family(3)
def caesar(d: Draw) -> Spec:
    k = d.int(1, 25)
    doc = f"Shift every lower-case letter of s {k} places forward in the alphabet, wrapping from z to a."
    body = f"return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)"
    return Spec(d.pick(["shift_letters", "caesar", "rotate_text", "encode"]), STR, "str", doc, body, _words(d),
                ("caesar", k))


@family(3)
def second_largest(d: Draw) -> Spec:
    doc, body = d.pick([
        ("Return the second largest distinct value in nums, or None if there is none.",
         "vals = sorted(set(nums))\nreturn vals[-2] if len(vals) > 1 else None"),
        ("Return the second smallest distinct value in nums, or None if there is none.",
         "vals = sorted(set(nums))\nreturn vals[1] if len(vals) > 1 else None"),
    ])
    def inputs():
        return _lists(d, 9, 0, 9)() + (([4, 4, 4],),)
    return Spec(d.pick(["runner_up", "second_best", "next_value"]), NUMS, "int | None", doc, body, inputs,
                ("second_largest", body))


@family(3)
def frequent_word(d: Draw) -> Spec:
    most = d.pick([True, False])
    pool = sorted({d.word() for _ in range(4)})
    cmp = ">" if most else "<"
    doc = (f"Return the word that appears {'most' if most else 'least'} often in s; on a tie, the one that "
           "appears first.")
    body = ("words = s.split()\nbest = words[0]\nfor w in words:\n"
            f"    if words.count(w) {cmp} words.count(best):\n        best = w\nreturn best")
    def inputs():
        return tuple((" ".join(d.pick(pool) for _ in range(d.int(2, 7))),) for _ in range(10))
    return Spec(d.pick(["top_word", "pick_word", "favourite"]), STR, "str", doc, body, inputs,
                ("frequent_word", most, tuple(pool)))


@family(3)
def rotate(d: Draw) -> Spec:
    k = d.int(1, 4)
    side = d.pick(["left", "right"])
    body = f"k = {k} % len(nums)\n" + ("return nums[k:] + nums[:k]" if side == "left" else
                                       "return nums[-k:] + nums[:-k] if k else list(nums)")
    doc = f"Rotate nums {k} places to the {side} (items that fall off one end come back at the other)."
    return Spec(d.pick(["rotate", "shift_list", "cycle"]), NUMS, "list", doc, body, _lists(d),
                ("rotate", k, side))


@family(3)
def chunk_sums(d: Draw) -> Spec:
    k = d.int(2, 4)
    doc = f"Split nums into consecutive chunks of {k} items (the last may be shorter) and return the sum of each."
    body = f"return [sum(nums[i:i + {k}]) for i in range(0, len(nums), {k})]"
    return Spec(d.pick(["chunk_sums", "group_totals", "batch_sum"]), NUMS, "list", doc, body,
                _lists(d, 9), ("chunk_sums", k))


@family(3)
def longest_run(d: Draw) -> Spec:
    k = d.pick([None, 0, 1, 2])
    what = "equal neighbouring items" if k is None else f"neighbouring items equal to {k}"
    doc = f"Return the length of the longest run of {what} in nums (0 if there is none)."
    same = "i and x == nums[i - 1]" if k is None else "i and x == nums[i - 1]"
    keep = "" if k is None else f"\n    if x != {k}:\n        cur = 0"
    body = (f"best = cur = 0\nfor i, x in enumerate(nums):\n    cur = cur + 1 if {same} else 1{keep}\n"
            "    best = max(best, cur)\nreturn best")
    return Spec(d.pick(["longest_run", "streak", "max_repeat"]), NUMS, "int", doc, body,
                lambda: _lists(d, 9, 0, 2)() + (([],),), ("longest_run", k))
