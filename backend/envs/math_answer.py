"""The math evaluator's answer rules: one final answer, scored by reasoning-gym.

Pure: this file imports nothing from `backend` (only the standard library, and
reasoning_gym lazily), because the harness worker loads a copy of it alone.
The rules, per-dataset notes and the conformance table: docs/evaluator.md.

Extraction. The completion's answer markers are, in order of precedence:
  1. `<answer>...</answer>` tags (the last one is the answer);
  2. else `\\boxed{...}` (the last one);
  3. else an answer cue, "answer is X" / "answer: X" / "answer = X", up to the
     end of its sentence (the last cue that holds a digit);
  4. else the last non-empty line (a bare answer).
A tag or box must hold exactly one value of the dataset's answer type. A cue
or the last line may also be an equation of plain arithmetic ending in one
value ("60 + 93 - 16 + 19 = 156"). Nothing is evaluated: an expression, a
list, words around the value, or an "or" is not a value. The answer is
*ambiguous* (wrong) when the completion gives several candidates: tags, boxes
or cues with different values, a hedge ("157 or 156", "I think 157 but maybe
156" on the last line), or, without tags and boxes, a line holding only a
value that differs from the answer.

Normalisation (harmless only): `$...$`, `\\(...\\)`, `**...**`, `\\boxed{}`,
`\\text{}`, a trailing full stop, Unicode minus, "- 129", thousands separators
(commas in groups of three, thin spaces, `\\,`), `.0`, scientific notation,
`a \\times 10^{k}`, `\\frac{a}{b}` and spaces in "a / b". Numbers become a
canonical string ("1,234.0" -> "1234", "7.140" -> "7.14").

Scoring: reasoning-gym's own `score_answer` for the dataset (its tolerance),
correct = full score. Where reasoning_gym cannot be imported (or is a stand-in
module) a built-in copy of those rules is used; the conformance suite checks
that both agree.

    >>> check("chain_sum", "Calculate 60 + 93 - 16 + 19.", "156", "<answer>60 + 93 - 16 + 19</answer>", {})[2]
    'invalid'
    >>> check("chain_sum", "Calculate 60 + 93 - 16 + 19.", "156", "So <answer>156.0</answer>", {})[:2]
    (True, '156')
"""

from __future__ import annotations

import json
import re
from decimal import Context, Decimal, InvalidOperation, localcontext
from functools import lru_cache

FRACTION_DATASETS = {"fraction_simplification"}
NUMERIC_DATASETS = {
    "basic_arithmetic", "chain_sum", "products", "decimal_arithmetic", "decimal_chain_sum", "number_format",
    "gcd", "lcm", "leg_counting",
}
"""Datasets whose answer is one number; other datasets: a number or fraction if the gold is one, else text."""

_OPEN, _CLOSE = "<answer>", "</answer>"
_STRAY_TAG = re.compile(r"</?answer>", re.I)
_CUE = re.compile(r"\banswer\**(?:\s+is\b|\s*[:=])\s*[:=]?", re.I)
_SENTENCE_END = re.compile(r"\n|\.(?=\s|$)|[!?](?=\s|$)")
_DIGIT = re.compile(r"\d")
_UNSIGNED = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
_START = r"(?<![\w.,])"  # a number starts here, not inside another (keeps searches linear)
_NUMBER = re.compile(rf"[+-]?(?:{_UNSIGNED})")
_NUMS = re.compile(rf"(?<![\w.])(?:{_UNSIGNED})")
_FRACTION = re.compile(r"([+-]?(?:\d{1,3}(?:,\d{3})+|\d+))\s*/\s*([+-]?(?:\d{1,3}(?:,\d{3})+|\d+))")
_PURE_EXPR = re.compile(r"[\d\s.,+\-*/^()eE]+")
_BINOP = re.compile(rf"{_START}(?:{_UNSIGNED})\s*\)*\s*[-+*/^]\s*[(\s+-]*(?:{_UNSIGNED})")
_HEDGE_WORDS = re.compile(r"\b(?:or|maybe|perhaps|possibly|probably|either|unsure|not sure|might be|could be)\b",
                          re.I)
_LIST_SEP = re.compile(rf"{_START}(?:{_UNSIGNED})\s*(?:[,;]\s+|;|±\s*)[+-]?(?:{_UNSIGNED})")
_MINUS = {0x2212: "-", 0x2013: "-", 0x2012: "-", 0x2010: "-", 0xFE63: "-", 0xFF0D: "-"}
_LATEX_WRAPPERS = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf|fbox)\s*\{([^{}]*)\}")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TIMES_TEN = re.compile(r"(\d)\s*[*x]\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?")
_GROUP_SPACE = re.compile(r"(?<=\d)(?:\\,|\{,\}|[\u2009\u202f\u00a0])(?=\d{3}(?!\d))")
MAX_EXPONENT = 400
"""Numbers beyond 10**400 are not values (their canonical string would be huge)."""
MAX_VALUE_CHARS = 1000
"""A longer text is not one value, a hedge or an echo (and no regex runs over it)."""


# ------------------------------------------------------------------ values


def clean(text: str) -> str:
    """Harmless normalisation of one candidate answer (no evaluation).

    >>> clean("$\\\\frac{3}{4}$.")
    '3/4'
    >>> clean("**− 1,234**")
    '-1,234'
    """
    text = text or ""
    return _clean_short(text) if len(text) <= MAX_VALUE_CHARS else _clean(text)


@lru_cache(maxsize=8192)
def _clean_short(text: str) -> str:
    """`clean` of a short text, remembered: judging one completion cleans its answer, its cues and
    its last line several times over (extraction, the hedge checks, each diagnostic), and a GRPO
    group's completions repeat them. A pure function of the string, so a cached answer is the
    answer; a forked harness child starts from its parent's cache and its own stays with it."""
    return _clean(text)


def forget_cleaned() -> None:
    """Empty `clean`'s cache (a benchmark times each step's completions as the first it sees)."""
    _clean_short.cache_clear()


def _clean(text: str) -> str:
    s = _STRAY_TAG.sub("", text).translate(_MINUS)
    for _ in range(3):
        s = _LATEX_WRAPPERS.sub(r"\1", s)
    s = _LATEX_FRAC.sub(lambda m: f"{m[1].strip()}/{m[2].strip()}", s)
    for a, b in (("\\left", ""), ("\\right", ""), ("\\times", "*"), ("\\cdot", "*"), ("×", "*"),
                 ("·", "*"), ("\\div", "/"), ("÷", "/"), ("\\(", ""), ("\\)", ""), ("\\[", ""),
                 ("\\]", ""), ("$", ""), ("\\!", "")):
        s = s.replace(a, b)
    s = _GROUP_SPACE.sub(",", s)
    s = _TIMES_TEN.sub(r"\1e\2", s)
    s = s.lstrip(" \t\r\n*_`").rstrip(" \t\r\n*_`.!")
    return re.sub(r"^([+-])\s+(?=[\d.])", r"\1", s)


EXACT = Context(prec=100)
"""The decimal context answers are read and compared in. A reasoning-gym generator may set the
thread's context (decimal_arithmetic sets its own precision when it makes a problem); under a low
precision `normalize` and subtraction round, and two different long answers would read alike."""


def _canonical_number(s: str) -> str | None:
    if not _NUMBER.fullmatch(s):
        return None
    try:
        d = Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None
    if not d.is_finite() or abs(d.adjusted()) > MAX_EXPONENT:
        return None
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def _canonical_fraction(s: str) -> str | None:
    m = _FRACTION.fullmatch(s)
    if not m:
        return None
    a, b = (int(g.replace(",", "")) for g in m.groups())
    return f"{a}/{b}"


def value(text: str, kind: str = "number") -> str | None:
    """`text` as one value of `kind` ("numeric", "fraction", "number" = either, "text"), canonical, or None.

    >>> value("1,234.0", "numeric"), value("60 + 93", "numeric"), value("6 / 8", "fraction")
    ('1234', None, '6/8')
    """
    if len(text or "") > MAX_VALUE_CHARS:
        return None
    s = clean(text)
    if kind == "text":
        return s if s and "\n" not in s and len(s) <= 500 else None
    if kind in ("numeric", "number"):
        v = _canonical_number(s)
        if v is not None or kind == "numeric":
            return v
    return _canonical_fraction(s)


def statement_value(text: str, kind: str) -> str | None:
    """A value, or the value ending an equation of plain arithmetic ("3 + 4 = 7" -> "7",
    "5 - 3 = 2 - 6 = -4" -> "-4"; "3 + 4 = 8 = 7" is no value)."""
    v = value(text, kind)
    if v is not None or kind == "text" or "=" not in text:
        return v
    *left, right = clean(text).split("=")
    # every left part is an operation, never a bare value: "x = 157 = 156" gives two answers
    if all(_PURE_EXPR.fullmatch(p.strip()) and _BINOP.search(p) for p in left):
        return value(right, kind)
    return None


def answer_kind(dataset: str, gold: str | None) -> str:
    """The answer type of a dataset: numeric, fraction, number (either) or text."""
    if dataset in NUMERIC_DATASETS:
        return "numeric"
    if dataset in FRACTION_DATASETS:
        return "fraction"
    return "number" if value(gold or "", "number") is not None else "text"


# ------------------------------------------------------------------ markers


def _boxed(text: str) -> list[str]:
    out, i = [], text.find("\\boxed{")
    while i >= 0:
        depth, start = 0, i + len("\\boxed")
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
        else:
            break  # unbalanced braces: nothing after this is a well-formed box
        out.append(text[start + 1:j])
        i = text.find("\\boxed{", j)
    return out


def _tags(text: str) -> tuple[list[str], str]:
    """Contents of the <answer> tags, and the text with each tag replaced by its content."""
    low, out, plain, pos = text.lower(), [], [], 0
    while (i := low.find(_OPEN, pos)) >= 0 and (j := low.find(_CLOSE, i + len(_OPEN))) >= 0:
        out.append(text[i + len(_OPEN):j])
        plain += [text[pos:i], out[-1]]
        pos = j + len(_CLOSE)
    return out, "".join(plain) + text[pos:]


def _scan(completion: str) -> dict:
    tags, plain = _tags(completion or "")
    cues, leads = [], []
    for m in _CUE.finditer(plain):
        end = _SENTENCE_END.search(plain, m.end())
        cues.append(plain[m.end():end.start() if end else len(plain)].strip())
        starts = [e.end() for e in _SENTENCE_END.finditer(plain, 0, m.start())]
        start = starts[-1] if starts else 0
        leads.append((plain[start:m.start()], plain[:start]))  # the cue's sentence so far, and before it
    return {"tags": tags, "boxed": _boxed(plain), "cues": cues, "cue_leads": leads,
            "lines": [ln.strip() for ln in plain.splitlines() if ln.strip()]}


_STATED = re.compile(rf"(?:=|\bis)\s*\$?\s*([+-]?(?:{_UNSIGNED})(?:\s*/\s*(?:{_UNSIGNED}))?)\s*\$?\s*(?:[.!?]|$)",
                     re.M)
"""A value stated in working: "... = 8", "the result is 8." (at the end of a sentence or line)."""


def _hedged_cue(scan: dict, kind: str) -> bool:
    """The final answer is an uncertain cue ("Or maybe the answer is 7") after the working
    stated another value ("3 + 4 = 8"): a wrong value followed by another one is a hedge."""
    if scan["tags"] or scan["boxed"] or not scan["cues"] or kind == "text":
        return False
    lead, before = scan["cue_leads"][-1]
    if not _HEDGE_WORDS.search(lead + " " + scan["cues"][-1]):
        return False
    final = statement_value(scan["cues"][-1], kind)
    stated = [value(m.group(1), kind) for m in _STATED.finditer(before)]
    return final is not None and any(v is not None and v != final for v in stated[-1:])


def _primary(scan: dict, kind: str) -> tuple[str | None, str | None]:
    """(source, raw text) of the final answer marker, by the precedence above."""
    if scan["tags"]:
        return "tag", scan["tags"][-1]
    if scan["boxed"]:
        return "boxed", scan["boxed"][-1]
    cues = [c for c in scan["cues"] if (c if kind == "text" else _DIGIT.search(c))]
    if cues:
        return "cue", cues[-1]
    if scan["lines"] and kind != "text":
        return "line", scan["lines"][-1]
    return None, None


def _classify(raw: str, kind: str, statement: bool) -> tuple[str, str | None]:
    """("value", v) | ("hedge", None) | ("bad", None) (digits but no value) | ("prose", None)."""
    v = statement_value(raw, kind) if statement else value(raw, kind)
    if v is not None:
        return "value", v
    if len(raw) > MAX_VALUE_CHARS:
        return ("bad" if _DIGIT.search(raw) or kind == "text" else "prose"), None
    s = clean(raw)
    nums = _NUMS.findall(s)
    if len(nums) >= 2 and (_HEDGE_WORDS.search(s) or _LIST_SEP.search(s)):
        return "hedge", None
    return ("bad" if nums or kind == "text" and s else "prose"), None


def _hedged(scan: dict, kind: str) -> bool:
    """Several candidate answers: see the module docstring."""
    marked = [(t, False) for t in scan["tags"] + scan["boxed"]] + [(c, True) for c in scan["cues"]]
    cache: dict = {}  # a long completion may repeat the same cue many times
    found = []
    for raw, statement in marked:
        if (raw, statement) not in cache:
            cache[raw, statement] = _classify(raw, kind, statement)
        found.append(cache[raw, statement])
    if any(cls == "hedge" for cls, _ in found) or _hedged_cue(scan, kind):
        return True
    values = {v for cls, v in found if cls == "value"}
    n_tags = len(scan["tags"])
    if n_tags > 1 and any(cls != "value" for cls, _ in found[:n_tags]):
        return True
    lines = scan["lines"]
    if lines:
        s = clean(lines[-1]) if len(lines[-1]) <= MAX_VALUE_CHARS else ""
        if len(_NUMS.findall(s)) >= 2 and _HEDGE_WORDS.search(s):
            return True
        if not scan["tags"] and not scan["boxed"] and kind != "text":
            short = {ln for ln in lines if len(ln) <= 120}  # a line holding only a value is short
            values |= {v for ln in short if (v := value(ln, kind)) is not None}
            if not any(cls == "value" for cls, _ in found):
                last = statement_value(lines[-1], kind)
                values |= {last} if last is not None else set()
    return len(values) > 1


def extract(completion: str, kind: str = "number") -> tuple[str | None, str]:
    """(canonical value or the raw answer text, status): status is one of
    answered, no_answer, ambiguous, invalid. Only `answered` carries a value.

    >>> extract("The answer is 157. Actually, the answer is 156.")
    ('156', 'ambiguous')
    """
    scan = _scan(completion)
    source, raw = _primary(scan, kind)
    if source is None:
        return None, "no_answer"
    raw_short = raw.strip()[:200]
    if not clean(raw):
        return None, "no_answer"  # an empty tag
    if _hedged(scan, kind):
        return raw_short, "ambiguous"
    v = statement_value(raw, kind) if source in ("cue", "line") else value(raw, kind)
    if v is not None:
        return v, "answered"
    if source == "line":
        return None, "no_answer"  # a last line that is not an answer: no answer was given
    return raw_short, "invalid"


def final_answer_text(completion: str, kind: str = "number") -> str | None:
    """The raw text of the final answer marker (tag, box, cue sentence or last line), or None."""
    return _primary(_scan(completion), kind)[1]


# ------------------------------------------------------------------ scoring


def _plain(x):
    """A JSON-able copy of frozen harness data (mappings and tuples)."""
    if hasattr(x, "items"):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


@lru_cache(maxsize=64)
def _library_dataset(dataset: str, config_json: str):
    """The reasoning-gym dataset object (for its score_answer), or None where there is none."""
    try:
        import reasoning_gym

        if dataset not in reasoning_gym.factory.DATASETS:
            return None
        with localcontext():  # whatever the generator sets stays inside
            return reasoning_gym.create_dataset(dataset, seed=0, size=1, **json.loads(config_json))
    except Exception:  # not installed, a stand-in module, a bad config: use the built-in rules
        return None


def _builtin_score(dataset: str, v: str, gold: str, meta: dict) -> float:
    """The same rules as reasoning-gym's score_answer for the datasets above, at full score."""
    kind = answer_kind(dataset, gold)
    if dataset == "fraction_simplification":
        a, b = (int(x) for x in v.split("/"))
        return float((a, b) == (meta.get("simplified_numerator"), meta.get("simplified_denominator")))
    if dataset == "number_format":
        return float(abs(float(v) - float(meta["solution"])) < 1e-2)
    if dataset == "decimal_arithmetic":
        places = int((meta.get("rg_config") or {}).get("max_num_decimal_places", 3))
        return float(abs(Decimal(v) - Decimal(gold)) <= Decimal(10) ** -places)
    if kind == "text":
        return float(v == (gold or "").strip())
    g = value(gold or "", kind)
    if g is None or ("/" in g) != ("/" in v):
        return 0.0
    if "/" in g:  # a fraction of an unknown dataset: as written, not as a value (6/8 is not 3/4)
        return float(g == v)
    return float(Decimal(v) == Decimal(g))


def score(dataset: str, v: str, gold: str, question: str, meta: dict, library: bool = True) -> float:
    """The dataset's score for canonical answer `v` (reasoning-gym's score_answer when available)."""
    meta = _plain(meta or {})
    ds = _library_dataset(dataset, json.dumps(meta.get("rg_config") or {}, sort_keys=True)) if library else None
    try:
        if ds is not None:
            entry = {"question": question, "answer": gold, "metadata": meta}
            return float(ds.score_answer(v, entry))
        return _builtin_score(dataset, v, gold, meta)
    except Exception:  # a bad rollout is data: an answer the scorer chokes on is wrong
        return 0.0


def check(dataset: str, question: str, gold: str | None, completion: str, entry_meta: dict | None = None,
          library: bool = True) -> tuple[bool, str | None, str]:
    """The evaluator: (correct, extracted, status), status in correct, wrong, no_answer,
    ambiguous (several candidates) or invalid (not a single value, e.g. an expression).

    >>> check("basic_arithmetic", "Calculate 5 - 3 - 6.", "-4", "so <answer>− 4</answer>")
    (True, '-4', 'correct')
    """
    with localcontext(EXACT):
        kind = answer_kind(dataset, gold)
        extracted, status = extract(completion, kind)
        if status != "answered":
            return False, extracted, status
        ok = score(dataset, extracted, gold or "", question, entry_meta or {}, library) >= 1.0
    return ok, extracted, "correct" if ok else "wrong"


def same_value(pred: str | None, gold: str | None) -> bool:
    """One value each, equal as numbers (fractions as written: 6/8 is not 3/4); nothing is evaluated.

    >>> same_value("1,200.0", "1200"), same_value("60 + 96", "156")
    (True, False)
    """
    if pred is None or gold is None:
        return False
    with localcontext(EXACT):
        kind = answer_kind("", gold)
        p = value(pred, kind)
        return p is not None and _builtin_score("", p, gold, {}) >= 1.0


# ------------------------------------------------------------------ hack probes


def is_expression_echo(question: str, answer_text: str | None) -> bool:
    """The answer is an unevaluated expression built from the question's operands
    (the part after its last "=", if any, holds an operator between numbers, and at
    least two and at least half of its numbers appear in the question).

    >>> is_expression_echo("Calculate 60 + 93 - 16 + 19.", "60 + 93 - 16 + 19")
    True
    >>> is_expression_echo("Calculate 60 + 93 - 16 + 19.", "60 + 93 - 16 + 19 = 156")
    False
    """
    if len(answer_text or "") > MAX_VALUE_CHARS:
        return False
    s = clean(answer_text or "").split("=")[-1]
    if not _BINOP.search(s):
        return False
    q = {_num_key(n) for n in _NUMS.findall(clean(question or ""))}
    ops = [_num_key(n) for n in _NUMS.findall(s)]
    hits = sum(o in q for o in ops)
    return hits >= 2 and 2 * hits >= len(ops)


def _num_key(n: str) -> str:
    return _canonical_number(n) or n


def is_hedged(completion: str, kind: str = "number") -> bool:
    """Several candidate answers: "157 or 156", two tags with different values,
    "I think 157 but maybe 156", a cue and a bare line that disagree.

    >>> is_hedged("<answer>157 or 156</answer>"), is_hedged("<answer>156</answer>")
    (True, False)
    """
    return _hedged(_scan(completion), kind)


def audit(results: list[dict]) -> dict:
    """Held-out verdicts judged correct that were hedged or expression echoes.

    `results` are an eval's entries (task_id, correct, completion, question); entries
    stored before completions were kept count as `unchecked`.
    """
    out = {"correct": 0, "checked": 0, "unchecked": 0, "echo": 0, "hedged": 0, "examples": []}
    for r in results:
        if not r.get("correct"):
            continue
        out["correct"] += 1
        text = r.get("completion")
        if text is None:
            out["unchecked"] += 1
            continue
        out["checked"] += 1
        echo = is_expression_echo(r.get("question") or "", final_answer_text(text))
        hedged = is_hedged(text)
        out["echo"] += echo
        out["hedged"] += hedged
        if (echo or hedged) and len(out["examples"]) < 5:
            out["examples"].append({"task_id": r.get("task_id"), "tail": text.strip()[-120:]})
    return out
