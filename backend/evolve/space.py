"""The harness's search space: every knob a harness exposes, with its type and range.

    >>> ks = knobs(default_code, "math", max_new_tokens_cap=512)          # doctest: +SKIP
    >>> [k.name for k in ks][:3]
    ['SAMPLING.temperature', 'SAMPLING.top_p', 'SAMPLING.max_new_tokens']
    >>> move = next(moves(code, ks[0], Steps.of(ks[0], [])))            # doctest: +SKIP
    >>> move.apply(code)                                                # one constant changed

A knob is one key of one top-level constant (sampling, each reward weight,
the advantage rule and its parameters, each filter, the curriculum level and
each dataset's weight, the system prompt). Its range narrows the schema's
(`backend/harness/spec.py`, which stays the one place for what is valid) to
where a search is sensible, and never widens it. The run's configuration
and budget (KL, group size, tasks per step, `train.max_new_tokens_cap`) are
not knobs: the cap only bounds `max_new_tokens`.

A move changes one knob of one constant: a single-factor change by
construction. Numeric knobs step up or down; the step adapts to how earlier
moves of that knob fared (Rechenberg's one-fifth rule: a move that passed
doubles the step, one that failed or was inconclusive shrinks it by 2^-1/4, so
the step is stable when one move in five passes) and the next move goes the
way that last passed, or away from the way that last failed; once those are all
tried, the untried values of the range at the knob's finest step come next,
nearest first (`grid`), so the space runs dry only when it is spent. A value
past one that failed, the same way from the same value, counts as tried
(`dominated`: a knob's effect is taken to have one peak). Code-level edits
(reward, extraction and diagnostic snippets) live in `templates.py`.

Harness code is untrusted: knobs and values are read from literals in the
source (`ast.literal_eval`), never by running it.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TypedDict, cast

from backend.envs.math import LEVELS as MATH_LEVELS
from backend.harness import spec

from . import deadgroups as dg
from .diagnose import DEAD
from .failures import FailureRow, RoundMetrics
from .edit import EditError, constant, literal_source, replace_name
from .interventions import Params, kind_of


GOOD = ("passed", "approved", "promoted", "rolled_back")
BAD = ("failed", "inconclusive", "vetoed")
GROW, SHRINK = 2.0, 2 ** -0.25
"""One-fifth rule: log(GROW) * 1/5 + log(SHRINK) * 4/5 = 0."""
if TYPE_CHECKING:
    from backend.store import Store

ByLabel = Mapping[str, FailureRow]
"""A round's failure table by label (`diagnose.failure_table`)."""

PREFIX = "space:"
"""A move's change kind (`params["template"]`) is `space:<knob>`: churn's cooldown counts per knob."""

PROMPTS = {
    "math": [
        "You are a careful math assistant. Think step by step, then give the final "
        "answer inside <answer></answer> tags, for example <answer>42</answer>.",
        "Solve the problem step by step. End your reply with the final answer inside "
        "<answer></answer> tags, like <answer>42</answer>.",
        "Give the final answer on its own last line as <answer>NUMBER</answer>. "
        "Example: What is 2 + 3? <answer>5</answer>",
        "Compute the result. Keep the working short, then write only the number inside "
        "<answer></answer>, for example <answer>-7</answer>.",
    ],
}
"""System prompts the PROMPT.system knob chooses from (a harness's own prompt is always one)."""

CURRICULUM_LEVELS = {"math": (0, len(cast(list[object], MATH_LEVELS["basic_arithmetic"])) - 1), "code": (0, 3),
                     "swe": (0, 4)}
"""Levels each domain's environment knows (backend/envs: math's LEVELS, code's tiers, swe's levels)."""


TRIAL_ONLY = ("ADVANTAGE", "CURRICULUM", "SAMPLING")
"""Constants whose changes only training shows (`why_trial`)."""
WHY_TRIAL = {
    ("ADVANTAGE", ""): "an advantage change resizes each group's update, which a replay cannot score",
    ("CURRICULUM", ""): "a curriculum change alters which tasks a probe draws",
    **{("SAMPLING", k): f"a sampling change ({k}) trades the accuracy of the samples a probe scores for the "
                        f"spread within a group that training learns from" for k in ("temperature", "top_p")},
    ("SAMPLING", "max_new_tokens"): "a token-budget change spends more or less compute than the incumbent",
    ("SAMPLING", "hint"): "a hint changes what training sees in all-wrong groups and is judged on validation "
                          "without hints: a revived dead-group share or a hinted probe is no evidence for it",
    ("SAMPLING", "resample_dead"): "resampling dead groups changes which rollouts training draws, which a "
                                   "replay of stored groups or a probe of one draw cannot show",
    ("SAMPLING", ""): "a sampling change alters what training draws",
}
"""Why a change of (constant, key) needs a trial; key "" stands for any key of the constant."""
OFF = {"hint": 0.0, "resample_dead": 0}
"""SAMPLING keys a harness may leave out: absent is the same as off."""


class Settings(Protocol):
    """The parts of a loaded harness (`backend.harness.loader.Harness`) that `why_trial` compares."""

    @property
    def sampling(self) -> Mapping[str, object]: ...
    @property
    def curriculum(self) -> Mapping[str, object]: ...
    @property
    def advantage(self) -> Mapping[str, object]: ...


def why_trial(cand: Settings, incumbent: Settings) -> str | None:
    """Why neither a replay nor a probe can judge `cand` against `incumbent`, or None: the one rule
    for moves left to a trial or the population (`WHY_TRIAL` says why for each). A colder policy
    answers a probe more often right and ties more in training; a hint or resampling acts only on
    the groups training draws; an advantage change resizes updates but, on a pass/fail reward,
    never turns one, and a replay scores only their direction against the evaluator's verdict."""
    if cand.advantage != incumbent.advantage:
        return WHY_TRIAL[("ADVANTAGE", "")]
    if cand.curriculum != incumbent.curriculum:
        return WHY_TRIAL[("CURRICULUM", "")]
    new, old = cand.sampling, incumbent.sampling
    for key in sorted(set(new) | set(old), key=lambda k: (("SAMPLING", k) not in WHY_TRIAL, k)):
        if new.get(key, OFF.get(key)) != old.get(key, OFF.get(key)):
            return WHY_TRIAL.get(("SAMPLING", key), WHY_TRIAL[("SAMPLING", "")])
    return None


def _narrow(bounds: tuple[Any, ...], lo: float, hi: float) -> tuple[float, float]:
    """A search range inside the schema's `bounds` (an error at import if it is not)."""
    if not (bounds[0] <= lo < hi <= bounds[1]):
        raise ValueError(f"search range [{lo}, {hi}] leaves the harness schema's {bounds}")
    return lo, hi


@dataclass(frozen=True)
class Knob:
    """One evolvable setting: `path` inside top-level `constant`, its type and search range."""

    name: str
    constant: str
    path: tuple[str, ...]
    type: str
    """float, int, bool or choice."""
    default: object
    """The value the schema assumes when the key is absent."""
    lo: float = 0.0
    hi: float = 1.0
    step: float = 0.1
    """The first move's size: added (linear) or, on a log scale, the log of the factor."""
    min_step: float = 0.01
    log: bool = False
    floor: float = 0.0
    """Log-scale knobs: the smallest positive value a move from 0 goes to."""
    choices: tuple[Any, ...] = ()
    off_first: bool = False
    """Numeric knobs: 0 (the term switched off) is the first move, before any step."""
    start: float | None = None
    """Numeric knobs off at 0: the value a move switches it on at first, before any step."""
    rescues: bool = False
    """A move that acts on dead groups (what training draws or sees: the curriculum, hints,
    resampling, the token budget): offered first in a stuck window (`rescue_first`)."""
    targets: tuple[str, ...] = ()
    """Failure labels this knob answers (the proposer ranks by their share)."""
    prefer: Callable[[ByLabel, RoundMetrics], int] | None = None
    """(failure table by label, round metrics) -> +1 up, -1 down, 0 no preference."""
    hypothesis: str = ""

    @property
    def kind(self) -> str:
        return kind_of(self.constant)

    @property
    def needs_trial(self) -> bool:
        """A move of this knob can be judged only by what training does with it, a trial or the
        population, never by replay agreement or a probe (`why_trial`, the one rule)."""
        return self.constant in TRIAL_ONLY

    def value(self, code: str) -> Any:
        """This knob's value in `code` (the schema default when the key is absent), or None
        when the constant is not a literal dict there."""
        node = constant(code, self.constant)
        for key in self.path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
        return node.get(self.path[-1], self.default)

    def clip(self, x: Any) -> Any:
        x = min(self.hi, max(self.lo, x))
        if self.type == "int":
            return int(round(x))
        return float(f"{x:.4g}")  # four significant digits: 1e-08 stays 1e-08, 0.8500001 becomes 0.85


@dataclass(frozen=True)
class Move:
    """Set one knob to a new value: a single-factor edit of its constant."""

    knob: Knob
    old: Any
    new: Any
    step: float | None = None

    def apply(self, code: str) -> str:
        value = constant(code, self.knob.constant)
        if not isinstance(value, dict):
            raise EditError(f"{self.knob.constant} is not a literal dict in this harness")
        node = value
        for key in self.knob.path[:-1]:
            node = node.setdefault(key, {})
        node[self.knob.path[-1]] = self.new
        return replace_name(code, self.knob.constant, f"{self.knob.constant} = {literal_source(value)}")

    @property
    def direction(self) -> int:
        if self.knob.type in ("float", "int"):
            return 1 if self.new > self.old else -1
        return 0

    def title(self) -> str:
        if self.knob.name == "PROMPT.system":
            return f"System prompt: choice {PROMPTS_INDEX.get(self.new, '?')}"
        return f"{self.knob.name}: {_show(self.old)} -> {_show(self.new)}"

    def params(self) -> Params:
        """What the intervention row keeps: the knob, both values, the step (read back by `Steps`)."""
        return {"template": PREFIX + self.knob.name, "knob": self.knob.name, "from": self.old, "to": self.new,
                "step": self.step, "op": "replace", "name": self.knob.constant}


PROMPTS_INDEX = {p: i for texts in PROMPTS.values() for i, p in enumerate(texts)}


def _show(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _share(table: ByLabel, *labels: str) -> float:
    return float(sum(table[lbl].get("share", 0.0) for lbl in labels if lbl in table))


def _temperature_way(t: ByLabel, m: RoundMetrics) -> int:
    # loops come from sampling too hot; groups that all tie on a sound policy from too little spread
    return -1 if _share(t, "repetition") > 0.1 else (1 if dg.of_table(t, m).stuck else 0)


def _level_way(t: ByLabel, m: RoundMetrics) -> int:
    # dead groups on a policy that is mostly wrong: easier tasks; mostly right: harder ones
    d = dg.of_table(t, m)
    return 0 if d.accuracy is None or d.dead < dg.MIXED else (-1 if d.accuracy < 0.5 else 1)


def _sampling(cap: int) -> list[Knob]:
    return [
        Knob("SAMPLING.temperature", "SAMPLING", ("temperature",), "float", 1.0,
             *_narrow(spec.TEMPERATURE, 0.1, 1.5), step=0.2, min_step=0.05,
             targets=("repetition", DEAD), prefer=_temperature_way,
             hypothesis="Sampling temperature sets the spread within a group: too hot loops, too cold ties."),
        Knob("SAMPLING.top_p", "SAMPLING", ("top_p",), "float", 1.0, *_narrow(spec.TOP_P, 0.5, 1.0), step=0.05,
             min_step=0.01, targets=("repetition",), prefer=lambda t, m: -1 if _share(t, "repetition") > 0.1 else 0,
             hypothesis="Cutting the tail of the token distribution removes gibberish continuations."),
        Knob("SAMPLING.max_new_tokens", "SAMPLING", ("max_new_tokens",), "int", 128,
             *_narrow(spec.MAX_NEW_TOKENS, min(32, cap - 1), cap), step=math.log(1.5), min_step=math.log(1.1),
             log=True, floor=32, targets=("truncated", "out_of_tokens"), prefer=dg.tokens_way, rescues=True,
             hypothesis="Answers are cut off before the final line, or the budget is spent on rambling."),
        Knob("SAMPLING.hint", "SAMPLING", ("hint",), "float", 0.0, *_narrow(spec.HINT, 0.0, 0.6), step=0.2,
             min_step=0.05, targets=(DEAD,), prefer=dg.hint_way, rescues=True,
             hypothesis="Groups that are all wrong teach nothing; a share of the reference solution as a "
                        "prefix lets them find a correct rollout to learn from."),
        Knob("SAMPLING.resample_dead", "SAMPLING", ("resample_dead",), "int", 0, *_narrow(spec.RESAMPLE_DEAD, 0, 4),
             step=1, min_step=1, targets=(DEAD,), prefer=dg.resample_way, rescues=True,
             hypothesis="A dead group drawn again may come out mixed where the policy is sometimes right."),
    ]


def _up_when(labels: tuple[Any, ...]) -> Callable[[ByLabel, RoundMetrics], int]:
    return lambda t, m: 1 if labels and _share(t, *labels) > 0.3 else 0


def _weights(code: str) -> list[Knob]:
    helps = {"format": ("no_answer_tag", "no_code_block"), "tool_format": ("malformed_tool_call",)}
    names = reward_names(code)
    if not names:
        return []
    out = []
    weights = constant(code, "REWARD_WEIGHTS")

    def weight(name: str) -> float:
        w = weights.get(name) if isinstance(weights, dict) else None
        return float(w) if isinstance(w, (int, float)) else 0.0

    advantage = constant(code, "ADVANTAGE")
    scale_free = not (isinstance(advantage, dict) and advantage.get("rule") == "group_mean")
    live = [n for n in names if weight(n) != 0]
    main = max(sorted(names), key=weight)
    for name in sorted(names):
        if scale_free and live == [name]:
            # the only term that pays: its weight only rescales every reward, and group_std and
            # rank take the scale out (moving it would take slots and replay at signal +0.000)
            continue
        # A secondary term is first switched off: group_std rescales any spread a term makes
        # inside a group to a full update, so halving or doubling format credit changes no
        # advantage in a group the evaluator judged alike (such a move replays at signal
        # +0.000), while 0 removes that update. The main term (the largest
        # weight: the verdict) is never switched off.
        out.append(Knob(f"REWARD_WEIGHTS.{name}", "REWARD_WEIGHTS", (name,), "float", 0.0,
                        *_narrow(spec.REWARD_WEIGHT, 0.0, 4.0), step=math.log(2.0), min_step=math.log(1.1),
                        log=True, floor=0.05, off_first=name != main, targets=helps.get(name, (DEAD,)),
                        prefer=_up_when(helps.get(name, ())),
                        hypothesis=f"The reward term '{name}' is weighted wrongly against the others."))
    return out


def _advantage() -> list[Knob]:
    return [
        Knob("ADVANTAGE.rule", "ADVANTAGE", ("rule",), "choice", "group_std", choices=spec.ADVANTAGE_RULES,
             targets=(DEAD,), hypothesis="Another group-relative rule spreads the learning signal differently."),
        Knob("ADVANTAGE.std", "ADVANTAGE", ("std",), "choice", "population", choices=spec.STD_CONVENTIONS,
             targets=(DEAD,), hypothesis="The std convention scales advantages of small groups."),
        Knob("ADVANTAGE.eps", "ADVANTAGE", ("eps",), "float", 1e-6, *_narrow(spec.ADVANTAGE_EPS, 1e-8, 1e-2),
             step=math.log(10.0),
             min_step=math.log(2.0), log=True, floor=1e-8,
             hypothesis="eps bounds the advantage of a group whose rewards barely differ."),
    ]


INERT_FILTERS = ("drop_dead_groups",)
"""Filters that change no update: a dead group's advantages are 0 whether or not it is dropped,
and a rollout is trained on only with a non-zero advantage (`backend.harness.semantics`), so the
filter only changes what the metrics count as kept. Not a knob: every move of it would replay
at exactly +0.000 [0, 0]."""


def _filters() -> list[Knob]:
    targets = {"drop_truncated": ("truncated", "out_of_tokens"), "drop_invalid": ()}
    return [Knob(f"FILTERS.{k}", "FILTERS", (k,), "bool", False, targets=targets[k],
                 hypothesis=f"Training on (or without) the rollouts '{k}' selects changes what the policy learns.")
            for k in spec.FILTER_KEYS if k not in INERT_FILTERS]


def _curriculum(code: str, domain: str, datasets: list[str] | None = None) -> list[Knob]:
    """The level and each dataset's weight. `datasets`: what the run draws from (math), when
    known: a weight for a dataset the run never draws, or a level its datasets ignore (math's
    levels exist for the datasets in `envs.math.LEVELS` only), would change nothing but still
    cost a trial."""
    lo, hi = CURRICULUM_LEVELS.get(domain, (0, 3))
    out = []
    if datasets is None or domain != "math" or any(d in MATH_LEVELS for d in datasets):
        out.append(Knob("CURRICULUM.level", "CURRICULUM", ("level",), "int", 1,
                        *_narrow(spec.CURRICULUM_LEVEL, lo, hi), step=1, min_step=1, targets=(DEAD,),
                        prefer=_level_way, rescues=True,
                        hypothesis="Tasks at the wrong difficulty make whole groups tie (all right or all wrong)."))
    mix = (constant(code, "CURRICULUM") or {}).get("datasets")
    drawn = [d for d in mix if datasets is None or d in datasets] if isinstance(mix, dict) else []
    for name in sorted(drawn) if len(drawn) > 1 else []:
        out.append(Knob(f"CURRICULUM.datasets.{name}", "CURRICULUM", ("datasets", name), "float", 1.0,
                        *_narrow(spec.DATASET_WEIGHT, 0.0, 4.0), step=math.log(2.0), min_step=math.log(1.2),
                        log=True, floor=0.25, targets=("wrong_value", DEAD), rescues=True,
                        hypothesis=f"More or less of '{name}' in the mix trains where the policy fails."))
    if out:  # a pass-rate target moves the level and the mix: without either it would change nothing
        out.append(Knob("CURRICULUM.target_pass_rate", "CURRICULUM", ("target_pass_rate",), "float", 0.0,
                        *_narrow(spec.TARGET_PASS_RATE, 0.0, 0.8), step=0.25, min_step=0.05, start=0.5,
                        targets=(DEAD,), prefer=dg.target_way, rescues=True,
                        hypothesis="Groups tie when tasks are all too hard or too easy; drawing the level and mix "
                                   "toward a pass rate per group keeps groups mixed (0.5 spreads them most)."))
    return out


def _prompt(domain: str) -> list[Knob]:
    texts = PROMPTS.get(domain)
    if not texts:
        return []
    return [Knob("PROMPT.system", "PROMPT", ("system",), "choice", "", choices=tuple(texts),
                 targets=("no_answer_tag", "empty"), hypothesis="The model does not follow the system prompt's "
                 "answer format; another wording or an example may help.")]


def rescue_first(knob: Knob, table: ByLabel, metrics: RoundMetrics) -> bool:
    """Whether a move of `knob` goes before every other option this round: the window is stuck
    (`deadgroups.STUCK`), the knob acts on dead groups, and its diagnosis points one way (a
    longer token budget only where rollouts are cut off, a hint only where groups are all wrong;
    a dataset's weight, with no way of its own, is left to the pass-rate target).

    >>> level = _curriculum("CURRICULUM = {'level': 2}", "code")[0]
    >>> stuck = {"dead_group_frac": 0.9, "accuracy": 0.01}
    >>> rescue_first(level, {}, stuck), rescue_first(level, {}, {"dead_group_frac": 0.1, "accuracy": 0.01})
    (True, False)
    """
    if not knob.rescues or not dg.of_table(table, metrics).stuck:
        return False
    return knob.prefer is not None and knob.prefer(table, metrics) != 0


def reward_names(code: str) -> set[str]:
    """Names `n` of the `reward_<n>` functions a harness defines (by parsing, never running it)."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError):
        return set()
    return {s.name[len("reward_"):] for s in body if isinstance(s, ast.FunctionDef) and s.name.startswith("reward_")}


def knobs(code: str, domain: str, max_new_tokens_cap: int = 512, datasets: list[str] | None = None) -> list[Knob]:
    """Every knob of this harness whose constant is a literal dict (a computed one has none);
    `datasets`: the run's math datasets, when known (see `_curriculum`; other domains ignore it)."""
    datasets = datasets if domain == "math" else None
    out = _sampling(max_new_tokens_cap) + _weights(code) + _advantage() + _filters() \
        + _curriculum(code, domain, datasets) + _prompt(domain)
    return [k for k in out if k.value(code) is not None]


MoveRecord = TypedDict("MoveRecord", {
    "id": int, "status": str, "from": Any, "to": Any, "step": float | None, "mode": str | None,
    "ci_low": float | None, "ci_high": float | None, "same_update": int | None}, total=False)
"""An earlier move of a knob and how its latest backtest judged it (`Store.move_history`); reports
pass their decision rows, which carry the same judgement keys, to `changed_nothing`."""


def history(store: Store) -> dict[str, list[MoveRecord]]:
    """Every earlier move of each knob, oldest first (the store's rows, typed)."""
    return cast(dict[str, list[MoveRecord]], store.move_history())


@dataclass(frozen=True)
class Steps:
    """A knob's current step size and preferred direction, from its earlier moves' outcomes."""

    size: float
    way: int = 0
    tried: int = 0
    good: int = 0
    failed: tuple[tuple[Any, Any], ...] = ()
    """(from, to) of every move of the knob that failed: values past one, the same way from the
    same value, count as tried (`dominated`)."""
    unchanged: tuple[tuple[Any, Any], ...] = ()
    """(from, to) of every move that changed nothing the gate can see (`changed_nothing`): values
    up to one, the same way from the same value, count as tried (`dominated`)."""

    @classmethod
    def of(cls, knob: Knob, history: list[MoveRecord]) -> "Steps":
        """`history`: this knob's earlier moves, oldest first, each {"from", "to", "status"} and
        optionally its latest backtest's "mode", "ci_low", "ci_high" and "same_update".

        A move that changed nothing the gate can see (`changed_nothing`) grows the step and keeps
        its way: it was too small to reach any rollout (a filter threshold short of every one, a
        weight too close to flip any rollout's side), or the knob does nothing here at any size
        (a weight whose rule takes the scale out). Growing reaches the range's ends in a few moves
        where shrinking would walk the range one ever smaller step a round, every move at +0.000."""
        size, way, tried, good, failed, unchanged = knob.step, 0, 0, 0, [], []
        for h in history:
            ok, bad = h["status"] in GOOD, h["status"] in BAD
            if not (ok or bad):
                continue  # still being decided
            tried += 1
            good += ok
            moved = _way(h.get("from"), h.get("to"))
            if changed_nothing(h["status"], h):
                unchanged.append((h.get("from"), h.get("to")))
                size, way = min(max(size * GROW, knob.min_step), _span(knob)), moved
                continue
            size = min(max(size * (GROW if ok else SHRINK), knob.min_step), _span(knob))
            way = moved if ok else -moved
            if h["status"] == "failed":
                failed.append((h.get("from"), h.get("to")))
        return cls(size, way, tried, good, tuple(failed), tuple(unchanged))


NO_EFFECT = 1e-3
"""A replayed move whose 95% interval lies within this of 0 measured nothing (`changed_nothing`):
one group of a thousand whose update changed side moves `signal` by 0.002."""


def changed_nothing(verdict: str, backtest: MoveRecord) -> bool:
    """Whether a move left `verdict` inconclusive because its latest backtest saw no change: its
    replay left training's update as it was (`same_update`), or its interval lies within NO_EFFECT
    of 0. A failed move counts as failed even so (its harm guard saw something). The second is the common
    case: a reward weight moved too little to turn any rollout's advantage against its verdict
    changes every advantage a little and `signal` not at all (an interval of +0.000 [+0.000, +0.000]
    with the update changed).

    >>> changed_nothing("inconclusive", {"mode": "replay", "ci_low": -0.0004, "ci_high": 0.0002})
    True
    >>> hugs_zero = {"mode": "replay", "ci_low": 0.0, "ci_high": 0.0}
    >>> changed_nothing("failed", hugs_zero), changed_nothing("inconclusive", dict(hugs_zero, mode="probe"))
    (False, False)
    """
    if verdict != "inconclusive":
        return False
    if backtest.get("same_update"):
        return True
    lo, hi = backtest.get("ci_low"), backtest.get("ci_high")
    return backtest.get("mode") == "replay" and lo is not None and hi is not None and max(abs(lo), abs(hi)) <= NO_EFFECT


def dominated(old: Any, new: Any, failed: tuple[tuple[Any, Any], ...],
              unchanged: tuple[tuple[Any, Any], ...] = ()) -> bool:
    """Whether moving a numeric knob from `old` to `new` goes at least as far, the same way, as a
    move from `old` that failed: the gate found the nearer value worse, and a knob's effect is taken
    to have one peak, so the farther one is presumed worse too. Without this the grid walked a
    failing direction one finest step a round (0.05, 0.055, 0.0605, ..., each move failing again).

    >>> dominated(0.0, 0.1, ((0.0, 0.05),)), dominated(0.0, 0.04, ((0.0, 0.05),))
    (True, False)
    >>> dominated(1.0, 0.5, ((0.0, 0.05),)), dominated(1.0, 0.5, ((1.0, 2.0),))
    (False, False)

    And whether it goes no farther, the same way, than a move from `old` that changed nothing the
    gate can see (`unchanged`): what the farther value did not reach, the nearer one does not
    either (a threshold crosses fewer rollouts; a weight moved less flips fewer advantages).

    >>> dominated(1.0, 1.25, (), ((1.0, 1.5),)), dominated(1.0, 2.0, (), ((1.0, 1.5),))
    (True, False)
    """
    way = _way(old, new)
    if way == 0:
        return False

    def same_way(moves: tuple[tuple[Any, Any], ...]) -> list[float]:
        return [abs(t - old) for f, t in moves if f == old and _way(old, t) == way]

    try:
        return any(abs(new - old) >= d for d in same_way(failed)) or \
            any(abs(new - old) <= d for d in same_way(unchanged))
    except TypeError:
        return False


def _span(k: Knob) -> float:
    if k.log:
        return math.log(max(k.hi, k.floor) / max(k.floor, 1e-12))
    return max(k.hi - k.lo, k.min_step)


def _way(a: Any, b: Any) -> int:
    try:
        return 0 if a == b else (1 if b > a else -1)
    except TypeError:
        return 0


def _shift(k: Knob, x: float, way: int, size: float) -> Any:
    size = min(size, _span(k))  # never past the range (and never overflowing a factor)
    if k.log:  # a factor from a positive value never goes below the floor, the log range's bottom
        base = x if x > 0 else (k.floor if way > 0 else 0.0)
        return k.clip(max(k.floor, base * math.exp(way * size)) if x > 0 else base)
    return k.clip(x + way * size)


def values(knob: Knob, old: Any, steps: Steps, table: ByLabel | None = None,
           metrics: RoundMetrics | None = None) -> list[Any]:
    """New values for `knob` from `old`, most promising first (none equals `old`)."""
    if knob.type == "bool":
        return [not old]
    if knob.type == "choice":
        return [c for c in knob.choices if c != old]
    if not isinstance(old, (int, float)) or isinstance(old, bool):
        return []
    first = steps.way or (knob.prefer(table or {}, metrics or {}) if knob.prefer else 0) or 1
    out = []
    for scale in (1.0, 0.5, 2.0):
        for way in (first, -first):
            v = _shift(knob, float(old), way, steps.size * scale)
            if v != old and v not in out:
                out.append(v)
    if knob.off_first and old > 0:  # a log scale alone never reaches 0
        out.insert(0, 0.0)
    if knob.start is not None and old == 0:
        out = [knob.clip(knob.start)] + [v for v in out if v != knob.clip(knob.start)]
    out += [v for v in grid(knob, float(old)) if v != old and v not in out]
    return [v for v in out if not dominated(old, v, steps.failed, steps.unchanged)]


def grid(knob: Knob, near: float) -> list[Any]:
    """A numeric knob's values at its finest step (`min_step`) from `near` across its range, nearest
    first, then the range's ends: where the steps' own moves were all tried, the untried values of the
    range come next, so a round proposes something while the space has untried moves (a long run
    tries every step-sized move early, and its later rounds would otherwise propose nothing)."""
    if knob.log:
        base = near if near > 0 else max(knob.lo, knob.floor)
        n = int(_span(knob) / knob.min_step) + 1
        points = [base * math.exp(sign * i * knob.min_step) for i in range(n) for sign in (1, -1)]
    else:
        n = int(round((knob.hi - knob.lo) / knob.min_step)) + 1
        points = [near + sign * i * knob.min_step for i in range(n) for sign in (1, -1)]
    out: list[Any] = []
    for v in points + [knob.lo if not knob.log else max(knob.lo, knob.floor), knob.hi]:
        v = knob.clip(v)
        if v not in out and (not knob.log or v >= knob.floor):
            out.append(v)
    return out


def moves(code: str, knob: Knob, steps: Steps, table: ByLabel | None = None,
          metrics: RoundMetrics | None = None) -> Any:
    """The moves of `knob` from this harness, most promising first."""
    old = knob.value(code)
    if old is None:
        return  # the constant is not a literal dict in this harness
    for new in values(knob, old, steps, table, metrics):
        yield Move(knob, old, new, steps.size if knob.type in ("float", "int") else None)
