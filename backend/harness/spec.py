"""What the engine knows of a harness: its constants, validated, as plain data.

The harness worker loads the code and sends back its top-level constants and
the names of its reward and diagnostic functions. `validate` is the schema
that data must pass before the engine uses any of it (types, ranges, sizes):
a candidate cannot hand the engine an object, a gigabyte string, a NaN weight
or a template that reads attributes. Pure standard library: this file is also
copied into the harness worker.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from dataclasses import dataclass, field
from typing import Any

from .check import HarnessError


ADVANTAGE_RULES = ("group_std", "group_mean", "rank")
STD_CONVENTIONS = ("population", "sample")
REQUIRED = ("DOMAIN", "PROMPT", "SAMPLING", "REWARD_WEIGHTS", "ADVANTAGE", "FILTERS", "CURRICULUM")
FILTER_KEYS = ("drop_dead_groups", "drop_truncated", "drop_invalid")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_TEXT = 8_000
"""Characters of a PROMPT string."""
MAX_ITEMS = 64
"""Entries of any dict or list a harness declares."""
# The ranges a harness's numbers must lie in: the one place for them (the proposer's search
# space, backend/evolve/space.py, narrows these and never widens them).
TEMPERATURE = (0.0, 5.0)
TOP_P = (1e-6, 1.0)
MAX_NEW_TOKENS = (1, 32_768)
REWARD_WEIGHT = (-1e6, 1e6)
ADVANTAGE_EPS = (0.0, 1e6)
"""Open interval: eps must be above 0 and below 1e6."""
CURRICULUM_LEVEL = (0, 100)
DATASET_WEIGHT = (0.0, 1e6)
HINT = (0.0, 0.9)
"""Share of a task's reference solution the engine places at the start of an all-wrong group's answers."""
RESAMPLE_DEAD = (0, 4)
"""Times the engine draws a dead group again, at most."""
TARGET_PASS_RATE = (0.0, 1.0)
"""Half-open: the curriculum rule's target group pass rate is at least 0 and below 1 (0: a fixed level)."""


def sha(code: str) -> str:
    """The short content hash that names a harness version."""
    return hashlib.sha256(code.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class HarnessSpec:
    """A harness's validated constants and function names (no code, no objects)."""

    domain: str
    prompt: dict[str, Any]
    sampling: dict[str, Any]
    weights: dict[str, float]
    advantage: dict[str, Any]
    filters: dict[str, Any]
    curriculum: dict[str, Any]
    validity: frozenset[str] = frozenset()
    rewards: tuple[str, ...] = ()
    diagnostics: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    """Other top-level constants that are plain data (shown, never used by the engine)."""

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "prompt": self.prompt, "sampling": self.sampling, "weights": self.weights,
                "advantage": self.advantage, "filters": self.filters, "curriculum": self.curriculum,
                "validity": sorted(self.validity), "rewards": list(self.rewards),
                "diagnostics": list(self.diagnostics)}


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise HarnessError(msg)


def _number(x: Any, what: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    _need(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi,
          f"{what} must be a finite number in [{lo}, {hi}]")
    return float(x)


def _plain_dict(x: Any, what: str) -> dict[str, Any]:
    _need(isinstance(x, dict) and len(x) <= MAX_ITEMS and all(isinstance(k, str) and NAME.match(k) for k in x),
          f"{what} must be a dict with plain string keys (at most {MAX_ITEMS})")
    checked: dict[str, Any] = x
    return checked


def _text(x: Any, what: str) -> str:
    _need(isinstance(x, str) and len(x) <= MAX_TEXT, f"{what} must be a string of at most {MAX_TEXT} characters")
    checked: str = x
    return checked


def validate(raw: dict[str, Any]) -> HarnessSpec:
    """Check what a worker sent and build the spec; raises HarnessError (one line)."""
    _need(isinstance(raw, dict), "harness worker sent no constants")
    consts: Any = raw.get("constants")
    _need(isinstance(consts, dict), "harness worker sent no constants")
    missing = [n for n in REQUIRED if n not in consts]
    _need(not missing, f"harness lacks {', '.join(missing)}")
    rewards, diagnostics = _names(raw.get("rewards")), _names(raw.get("diagnostics"))
    domain = consts["DOMAIN"]
    _need(isinstance(domain, str) and domain in ("math", "code", "swe"), "DOMAIN must be 'math', 'code' or 'swe'")
    return HarnessSpec(
        domain=domain, prompt=_prompt(consts["PROMPT"]), sampling=_sampling(consts["SAMPLING"]),
        weights=_weights(consts["REWARD_WEIGHTS"], rewards), advantage=_advantage(consts["ADVANTAGE"]),
        filters=_filters(consts["FILTERS"]), curriculum=_curriculum(consts["CURRICULUM"]),
        validity=_validity(consts.get("VALIDITY", [])), rewards=rewards, diagnostics=diagnostics)


def _names(x: Any) -> tuple[str, ...]:
    _need(isinstance(x, list) and len(x) <= MAX_ITEMS and all(isinstance(n, str) and NAME.match(n) for n in x),
          "harness function names are malformed")
    return tuple(x)


def _prompt(p: Any) -> dict[str, Any]:
    p = _plain_dict(p, "PROMPT")
    out = {"system": _text(p.get("system", ""), "PROMPT system"),
           "template": _text(p.get("template", "{question}"), "PROMPT template")}
    try:
        fields = list(string.Formatter().parse(out["template"]))
    except ValueError:
        raise HarnessError("PROMPT template is not a valid format string") from None
    for _text_part, name, spec, conv in fields:
        # `{question.__class__}` would read attributes, `{question:>999999999}` allocate a gigabyte
        _need(name is None or (name.isidentifier() and not spec and not conv),
              f"PROMPT template field '{{{name}}}' must be a plain {{name}}")
    return out


def _sampling(s: Any) -> dict[str, Any]:
    s = _plain_dict(s, "SAMPLING")
    temperature = _number(s.get("temperature", 1.0), "SAMPLING temperature", *TEMPERATURE)
    top_p = _number(s.get("top_p", 1.0), "SAMPLING top_p", *TOP_P)
    mnt = s.get("max_new_tokens", 128)
    lo, hi = MAX_NEW_TOKENS
    _need(isinstance(mnt, int) and not isinstance(mnt, bool) and lo <= mnt <= hi,
          f"SAMPLING max_new_tokens must be an integer in [{lo}, {hi}]")
    out = {"temperature": temperature, "top_p": top_p, "max_new_tokens": mnt}
    # the moves on dead groups appear only where the harness names them: a harness without them is
    # the same data (and the same training) as before they existed
    if "hint" in s:
        out["hint"] = _number(s["hint"], "SAMPLING hint", *HINT)
    if "resample_dead" in s:
        n = s["resample_dead"]
        lo, hi = RESAMPLE_DEAD
        _need(isinstance(n, int) and not isinstance(n, bool) and lo <= n <= hi,
              f"SAMPLING resample_dead must be an integer in [{lo}, {hi}]")
        out["resample_dead"] = n
    return out


def _weights(w: Any, rewards: tuple[str, ...]) -> dict[str, float]:
    w = _plain_dict(w, "REWARD_WEIGHTS")
    _need(bool(w), "REWARD_WEIGHTS must be a non-empty dict")
    for name in w:
        _need(name in rewards, f"REWARD_WEIGHTS names '{name}' but there is no reward_{name}()")
    return {k: _number(v, f"REWARD_WEIGHTS['{k}']", *REWARD_WEIGHT) for k, v in w.items()}


def _advantage(a: Any) -> dict[str, Any]:
    a = _plain_dict(a, "ADVANTAGE")
    rule = a.get("rule")
    _need(rule in ADVANTAGE_RULES, f"ADVANTAGE rule '{rule}' is not one of {', '.join(ADVANTAGE_RULES)}")
    eps = a.get("eps", 1e-6)
    _need(isinstance(eps, (int, float)) and not isinstance(eps, bool) and ADVANTAGE_EPS[0] < eps < ADVANTAGE_EPS[1],
          "ADVANTAGE eps must be a positive finite number")
    std = a.get("std", "population")
    _need(std in STD_CONVENTIONS, f"ADVANTAGE std must be one of {', '.join(STD_CONVENTIONS)}")
    return {"rule": rule, "eps": float(eps), "std": std}


def _filters(f: Any) -> dict[str, Any]:
    f = _plain_dict(f, "FILTERS")
    unknown = [k for k in f if k not in FILTER_KEYS]
    _need(not unknown, f"FILTERS has unknown key(s): {', '.join(unknown)}")
    _need(all(isinstance(v, bool) for v in f.values()), "FILTERS values must be True or False")
    return {k: bool(f.get(k, False)) for k in FILTER_KEYS}


def _curriculum(c: Any) -> dict[str, Any]:
    c = _plain_dict(c, "CURRICULUM")
    out: dict[str, Any] = {}
    for k, v in c.items():
        if k == "datasets":
            d = _plain_dict(v, "CURRICULUM datasets")
            out[k] = {name: _number(x, f"CURRICULUM weight of {name}", *DATASET_WEIGHT) for name, x in d.items()}
            _need(any(x > 0 for x in out[k].values()) or not out[k], "CURRICULUM datasets need a positive weight")
        elif k == "target_pass_rate":
            lo, hi = TARGET_PASS_RATE
            _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v < hi,
                  f"CURRICULUM target_pass_rate must be a number in [{lo}, {hi}) (0: a fixed level)")
            out[k] = float(v)
        elif k == "level":
            _need(isinstance(v, int) and not isinstance(v, bool) and CURRICULUM_LEVEL[0] <= v <= CURRICULUM_LEVEL[1],
                  f"CURRICULUM level must be an integer in [{CURRICULUM_LEVEL[0]}, {CURRICULUM_LEVEL[1]}]")
            out[k] = v
        else:
            _need(isinstance(v, (int, float, str, bool)) and (not isinstance(v, str) or len(v) <= 200)
                  and (not isinstance(v, float) or math.isfinite(v)),
                  f"CURRICULUM {k} must be a short scalar")
            out[k] = v
    return out


def _validity(v: Any) -> frozenset[str]:
    _need(isinstance(v, (list, tuple)) and len(v) <= MAX_ITEMS and all(isinstance(x, str) and NAME.match(x)
                                                                       for x in v),
          "VALIDITY must be a list of label names")
    return frozenset(v)
