"""From a family's `Spec` to a task: prompt, hidden tests and a checked reference.

A family (families_*.py) draws a `Spec` from a seeded `Draw`: the function's
name and signature, a docstring sentence, the reference body and a list of
inputs. `build` runs the reference on the inputs (our own template code, never
a completion) to get the expected values, shows the first two as doctest
examples in the prompt and keeps the rest, at least `MIN_HIDDEN`, as the
hidden tests. A spec whose hidden answers are all equal (a constant would pass)
or that has too few distinct inputs is rejected, and the caller draws again.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

MIN_HIDDEN = 5
VISIBLE = 2
_CHECK = Path(__file__).with_name("_check.py")
_VOCAB = Path(__file__).resolve().parents[2] / "data" / "code" / "vocab.json"


class BadSpec(ValueError):
    """A drawn spec that cannot make a fair task (the family draws again)."""


@dataclass(frozen=True)
class Spec:
    name: str
    params: tuple[tuple[str, str], ...]
    """(name, annotation) of each parameter."""
    ret: str
    doc: str
    body: str
    """The reference body, unindented lines."""
    inputs: Callable[[], tuple[tuple, ...]]
    """Draws the argument tuples (after the meaning): the first two become the visible examples."""
    key: tuple
    """What the task means (family constants, never names or wording): the split reads it."""


@dataclass(frozen=True)
class Problem:
    """A generated task, everything the evaluator needs."""

    id: str
    family: str
    level: int
    key: str
    prompt: str
    entry_point: str
    test: str
    solution: str
    visible: tuple = ()
    """(call, expected repr) of the prompt's examples."""
    n_tests: int = 0
    meta: dict = field(default_factory=dict)


@lru_cache(maxsize=1)
def vocab() -> dict:
    return json.loads(_VOCAB.read_text())


@lru_cache(maxsize=1)
def _check_head() -> str:
    return _CHECK.read_text()


REGISTRY: dict[str, tuple[int, Callable[["Draw"], Spec]]] = {}
"""family name -> (level, the function that draws its Spec)."""


def family(level: int):
    """Register a family at `level` under its function's name."""
    def register(fn):
        REGISTRY[fn.__name__] = (level, fn)
        return fn
    return register


class Draw:
    """The seeded choices a family makes (one per task, from its seed)."""

    def __init__(self, seed: str):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options):
        return self.rng.choice(list(options))

    def ints(self, k: int, lo: int, hi: int) -> list[int]:
        return self.rng.sample(range(lo, hi + 1), k)

    def int_list(self, lo: int, hi: int, min_len: int = 3, max_len: int = 6) -> list[int]:
        return [self.rng.randint(lo, hi) for _ in range(self.rng.randint(min_len, max_len))]

    def word(self) -> str:
        return self.rng.choice(vocab()["words"])

    def words(self, k: int) -> list[str]:
        return [self.word() for _ in range(k)]

    def letter(self) -> str:
        return self.rng.choice(vocab()["letters"])


def signature(spec: Spec) -> str:
    params = ", ".join(f"{n}: {a}" for n, a in spec.params)
    return f"def {spec.name}({params}) -> {spec.ret}:"


def _reference(spec: Spec) -> tuple[str, object]:
    body = "\n".join("    " + ln for ln in spec.body.strip("\n").splitlines())
    source = f"{signature(spec)}\n{body}\n"
    ns: dict = {}
    exec(compile(source, f"<reference {spec.name}>", "exec"), ns)  # our template, not a completion
    return source, ns[spec.name]


def _call(spec: Spec, args: tuple) -> str:
    return f"{spec.name}({', '.join(repr(a) for a in args)})"


def _cases(spec: Spec, fn) -> list[tuple[str, tuple, object]]:
    seen, out = set(), []
    for args in spec.inputs():
        r = repr(args)
        if r in seen:
            continue
        seen.add(r)
        try:
            want = fn(*copy.deepcopy(args))
        except Exception as e:  # an input the reference cannot take: draw again
            raise BadSpec(f"the reference raised {type(e).__name__} on {args!r}") from None
        if isinstance(want, float):
            raise BadSpec("float answers compare badly")
        out.append((_call(spec, args), tuple(args), want))
    if len(out) < VISIBLE + MIN_HIDDEN:
        raise BadSpec(f"{len(out)} distinct inputs")
    if len({repr(w) for _, _, w in out[VISIBLE:]}) < 2:
        raise BadSpec("every hidden answer is the same")
    return out


def prompt_of(spec: Spec, visible: list[tuple[str, tuple, object]]) -> str:
    lines = [signature(spec), '    """' + spec.doc, ""]
    for call, _, want in visible:
        lines += [f"    >>> {call}", f"    {want!r}"]
    return "\n".join(lines + ['    """', ""])


def build(spec: Spec, family: str, level: int, seed: int, key: str) -> Problem:
    source, fn = _reference(spec)
    cases = _cases(spec, fn)
    visible, hidden = cases[:VISIBLE], cases[VISIBLE:]
    test = _check_head() + f"\n\ncheck = make_check({hidden!r})\n"
    return Problem(id=f"gen/{family}/{seed}", family=family, level=level, key=key,
                   prompt=prompt_of(spec, visible), entry_point=spec.name, test=test,
                   solution=source, visible=tuple((c, repr(w)) for c, _, w in visible), n_tests=len(hidden))
