"""Generated function-synthesis tasks in levels 0-3, split by what they mean.

A task is a (family, seed) pair: the family (families_basic.py: levels 0-1,
families_loops.py: levels 2-3) draws constants, wording and a name from the
seed, and `build` turns that into a prompt (signature, docstring, two doctest
examples), hidden tests (at least five cases) and a reference solution. The
same (family, seed) gives the same task on every machine.

Train, validation and test are split by a hash of the task's `key`, what it
means (family and constants, never names or wording), so a held-out task never
appears in training under another name. The held-out sets are fixed pools per
level (`POOL`): families take turns, so any prefix is a mix of them.

    >>> p = make("affine", 7)
    >>> p.id, p.level, p.n_tests >= 5
    ('gen/affine/7', 0, True)
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from . import families_basic, families_loops  # noqa: F401  (they register their families)
from .build import MIN_HIDDEN, REGISTRY, BadSpec, Draw, Problem, build

LEVELS = (0, 1, 2, 3)
SPLITS = ("train", "validation", "test")
POOL = {"validation": 250, "test": 500}
"""Held-out tasks per level, at most (levels 2-3 have fewer distinct meanings than this)."""
_SEEDS_PER_FAMILY = 1000
"""How far a held-out pool looks for new meanings in each family."""
PREFIX = "gen/"

__all__ = ["LEVELS", "MIN_HIDDEN", "POOL", "Problem", "families", "heldout", "is_generated", "make", "problem",
           "sample", "split_of"]


def families(level: int | None = None) -> list[str]:
    """Family names at `level` (all levels when None), in registration order."""
    return [name for name, (lv, _) in REGISTRY.items() if level is None or lv == level]


def split_of(key: str) -> str:
    """train (70%), validation (10%) or test (20%), by a hash of the task's meaning."""
    bucket = int.from_bytes(hashlib.sha256(f"codegen-split:{key}".encode()).digest()[:8], "big") % 10
    return "validation" if bucket == 0 else ("test" if bucket <= 2 else "train")


@lru_cache(maxsize=8192)  # a step's tasks are judged right after they are drawn; the pools keep their own
def make(family: str, seed: int) -> Problem:
    """The task (family, seed). Raises KeyError for an unknown family."""
    level, draw = REGISTRY[family]
    for attempt in range(20):
        spec = draw(Draw(f"{family}:{seed}:{attempt}"))
        try:
            return build(spec, family, level, seed, repr(spec.key))
        except BadSpec:
            continue
    raise RuntimeError(f"family {family} drew no fair task for seed {seed}")


def _first_key(family: str, seed: int) -> str:
    """The key of the task's first draw (what `make` keeps unless that draw was unfair)."""
    return repr(REGISTRY[family][1](Draw(f"{family}:{seed}:0")).key)


def is_generated(task_id: str) -> bool:
    return task_id.startswith(PREFIX)


def problem(task_id: str) -> Problem:
    """The task behind an id `gen/FAMILY/SEED`; KeyError if it is not one."""
    try:
        _, family, seed = task_id.split("/")
        return make(family, int(seed))
    except ValueError:
        raise KeyError(task_id) from None


def sample(rng: random.Random, level: int, n: int) -> list[Problem]:
    """n training tasks at `level` (families drawn evenly; held-out meanings redrawn)."""
    names = families(min(max(level, LEVELS[0]), LEVELS[-1]))
    out = []
    while len(out) < n:
        p = make(rng.choice(names), rng.randrange(10**9))
        if split_of(p.key) == "train":
            out.append(p)
    return out


@lru_cache(maxsize=8)
def _meanings(level: int) -> dict[str, tuple[tuple[str, int], ...]]:
    """Each family's distinct meanings at `level`, as (key, first seed), in seed order."""
    out = {}
    for f in families(level):
        seen: dict[str, int] = {}
        for seed in range(_SEEDS_PER_FAMILY):
            seen.setdefault(_first_key(f, seed), seed)
        out[f] = tuple(seen.items())
    return out


@lru_cache(maxsize=16)
def _pool(split: str, level: int) -> tuple[Problem, ...]:
    """The frozen held-out pool of one level: families take turns, one new meaning each."""
    queues = {f: [seed for key, seed in m if split_of(key) == split] for f, m in _meanings(level).items()}
    picked: list[tuple[str, int]] = []
    for i in range(max((len(q) for q in queues.values()), default=0)):
        picked += [(f, q[i]) for f, q in queues.items() if i < len(q)]
    out, seen = [], set()
    for f, seed in picked:
        p = make(f, seed)
        if p.key not in seen and split_of(p.key) == split:  # a redrawn spec may mean something else
            seen.add(p.key)
            out.append(p)
        if len(out) >= POOL[split]:
            break
    return tuple(out)


def heldout(split: str, levels: list[int] | tuple[int, ...]) -> list[Problem]:
    """The frozen validation or test set over `levels`, interleaved so a prefix mixes levels."""
    pools = [_pool(split, lv) for lv in levels]
    out = []
    for i in range(max((len(p) for p in pools), default=0)):
        out += [p[i] for p in pools if i < len(p)]
    return out
