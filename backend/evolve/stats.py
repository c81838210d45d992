"""Paired statistics for gate decisions: effects with intervals, the decision rule, power.

Every decision compares a candidate with the incumbent on the same units
(prompts, problems, replayed rollouts), so the tests are paired:

- `paired_binary(a, b)`: one pass/fail outcome per unit and arm. The p-value
  is the exact McNemar test (a sign test on the discordant pairs); the 95%
  interval for the difference in proportions is Newcombe's score interval
  (method 10), which stays sensible when few pairs disagree.
- `paired_bootstrap(a, b, seed)`: one number per unit and arm (a prompt's
  mean accuracy over its rollouts, a replayed rollout's agreement). The
  interval is the percentile bootstrap over units; the p-value comes from the
  same resamples with the null imposed (differences shifted to mean zero).
  Seeded, so a decision replays identically.

`decide(effect, min_gain, harm)` turns effects into a `Decision`: `passed`
needs the interval's lower bound above `min_gain` on the targeted metric and
no significant harm on accuracy; a lower bound at or below `min_gain` without
harm is `inconclusive`; significant harm (or a hard failure) is `failed`.

    >>> e = paired_binary([False] * 40 + [True] * 24, [True] * 40 + [True] * 24)
    >>> round(e.effect, 3), e.p_value < 1e-6
    (0.625, True)
    >>> decide(e, min_gain=0.02).status
    'passed'

`wilson_interval(k, n)` is the interval of one accuracy (reports, not the gate).
`sample_size` and `power` size probes (see docs/gate.md for the formula).
Pure Python: no torch, no numpy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from statistics import NormalDist, fmean
from typing import Any, Mapping, TypedDict, TypeVar


ALPHA = 0.05
POWER = 0.8
BOOTSTRAP = 2000
"""Bootstrap resamples: the p-value's resolution is 1/2001."""

_N = NormalDist()


def z(q: float) -> float:
    """The standard normal quantile."""
    return _N.inv_cdf(q)


class EffectRecord(TypedDict):
    """An `Effect` as a backtest's metrics and a skill card keep it (`Effect.record`)."""

    metric: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    test: str
    base: float
    new: float
    rollouts: int
    detail: dict[str, int]


@dataclass(frozen=True)
class Effect:
    """Candidate minus incumbent on one metric, over `n` paired units."""

    metric: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    test: str
    """mcnemar-exact or paired-bootstrap."""
    base: float = 0.0
    """The incumbent's mean (what power is computed around)."""
    new: float = 0.0
    """The candidate's mean."""
    rollouts: int = 1
    """Rollouts behind each unit's value (a probe's group size); 1 for a single outcome."""
    detail: dict[str, int] = field(default_factory=dict)
    """McNemar's table (both, only_new, only_old, neither); empty for a bootstrap."""

    @property
    def harmful(self) -> bool:
        """Significantly below zero at ALPHA."""
        return self.n > 0 and self.effect < 0 and self.p_value < ALPHA

    def record(self) -> EffectRecord:
        """The effect as plain data (every field)."""
        return {"metric": self.metric, "effect": self.effect, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p_value": self.p_value, "n": self.n, "test": self.test, "base": self.base, "new": self.new,
                "rollouts": self.rollouts, "detail": dict(self.detail)}

    def text(self) -> str:
        """`accuracy +0.031 [-0.012, +0.074], p 0.21, n 64`."""
        return (f"{self.metric} {self.effect:+.3f} [{self.ci_low:+.3f}, {self.ci_high:+.3f}], "
                f"p {self.p_value:.3g}, n {self.n}")


def _wilson(k: int, n: int, zz: float) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + zz * zz / (2 * n)) / (1 + zz * zz / n)
    half = zz * math.sqrt(p * (1 - p) / n + zz * zz / (4 * n * n)) / (1 + zz * zz / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_interval(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Wilson score interval of one proportion, `k` of `n` (a held-out accuracy).

    >>> [round(x, 3) for x in wilson_interval(146, 500)]
    [0.254, 0.333]
    """
    return _wilson(k, n, z(1 - alpha / 2))


def sign_test(k: int, d: int) -> float:
    """Two-sided exact binomial p-value for `k` successes in `d` trials at p = 0.5 (doubled tail)."""
    if d == 0:
        return 1.0
    lo = min(k, d - k)
    p: float = 2 * sum(math.comb(d, i) for i in range(lo + 1)) / 2 ** d
    return min(1.0, p)


def paired_binary(a: list[bool], b: list[bool], metric: str = "accuracy", alpha: float = ALPHA,
                  rollouts: int = 1) -> Effect:
    """Paired pass/fail outcomes: `a` the incumbent's, `b` the candidate's, unit by unit.

    >>> paired_binary([True, False, False], [True, True, False]).detail
    {'both': 1, 'only_new': 1, 'only_old': 0, 'neither': 1}
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    n = len(a)
    e = sum(1 for x, y in zip(a, b) if x and y)
    f = sum(1 for x, y in zip(a, b) if y and not x)  # only the candidate right
    g = sum(1 for x, y in zip(a, b) if x and not y)  # only the incumbent right
    h = n - e - f - g
    detail = {"both": e, "only_new": f, "only_old": g, "neither": h}
    if n == 0:
        return Effect(metric, 0.0, 0.0, 0.0, 1.0, 0, "mcnemar-exact", detail=detail)
    p1, p2 = (e + f) / n, (e + g) / n
    diff = p1 - p2
    zz = z(1 - alpha / 2)
    l1, u1 = _wilson(e + f, n, zz)
    l2, u2 = _wilson(e + g, n, zz)
    marg = (e + f) * (g + h) * (e + g) * (f + h)
    phi = (e * h - f * g) / math.sqrt(marg) if marg else 0.0
    lo = diff - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = diff + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return Effect(metric, diff, max(-1.0, lo), min(1.0, hi), sign_test(f, f + g), n, "mcnemar-exact",
                  base=p2, new=p1, rollouts=rollouts, detail=detail)


def paired_bootstrap(a: list[float], b: list[float], seed: int = 0, metric: str = "score",
                     alpha: float = ALPHA, n_boot: int = BOOTSTRAP, rollouts: int = 1) -> Effect:
    """Paired values per unit (`a` incumbent, `b` candidate): mean difference, percentile
    interval and a null-shifted two-sided p-value from `n_boot` resamples of the units."""
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length: {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return Effect(metric, 0.0, 0.0, 0.0, 1.0, 0, "paired-bootstrap")
    d = [float(y) - float(x) for x, y in zip(a, b)]
    obs = fmean(d)
    rng = random.Random(seed)
    means = sorted(fmean(rng.choices(d, k=n)) for _ in range(n_boot))
    lo = means[max(0, math.floor(alpha / 2 * n_boot))]
    hi = means[min(n_boot - 1, math.ceil((1 - alpha / 2) * n_boot) - 1)]
    # Null imposed by shifting: resampled means minus the observed mean are the null distribution.
    extreme = sum(1 for m in means if abs(m - obs) >= abs(obs) - 1e-12)
    p = (1 + extreme) / (1 + n_boot)
    return Effect(metric, obs, lo, hi, min(1.0, p), n, "paired-bootstrap", base=fmean(map(float, a)),
                  new=fmean(map(float, b)), rollouts=rollouts)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def per_unit(values: Iterable[tuple[K, float]]) -> dict[K, float]:
    """Mean value per unit (a prompt's rollouts averaged), from (unit, value) pairs.

    >>> per_unit([("a", 1.0), ("a", 0.0), ("b", 1.0)])
    {'a': 0.5, 'b': 1.0}
    """
    acc: dict[K, list[float]] = {}
    for unit, value in values:
        acc.setdefault(unit, []).append(value)
    return {u: fmean(v) for u, v in acc.items()}


def pair_up(old: Mapping[Any, V], new: Mapping[Any, V]) -> tuple[list[V], list[V]]:
    """Values of the units both arms have, in a stable order (unit keys sorted as text)."""
    keys = sorted(set(old) & set(new), key=str)
    return [old[k] for k in keys], [new[k] for k in keys]


# ---------------------------------------------------------------- the decision rule


class DecisionRecord(TypedDict):
    """A `Decision` as a backtest's metrics keep it (`Decision.record`): every field."""

    metric: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    status: str
    reason: str
    underpowered: bool
    mde: float | None
    harm: EffectRecord | None


class DecisionColumns(TypedDict):
    """The backtests columns a decision fills (`Decision.row`)."""

    metric: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    underpowered: int


@dataclass(frozen=True)
class Decision:
    """What the gate concluded from an effect: the row a backtest stores."""

    metric: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    status: str
    """passed, inconclusive or failed."""
    reason: str
    underpowered: bool = False
    """The design could not have detected `min_effect` with power 0.8 at this sample size."""
    mde: float | None = None
    """Smallest true gain this sample detects with power 0.8 (min_gain plus the noise margin)."""
    harm: Effect | None = None

    def row(self) -> DecisionColumns:
        """The backtests columns this decision fills (see schema m003_gate)."""
        return {"metric": self.metric, "effect": self.effect, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p_value": self.p_value, "n": self.n, "underpowered": int(self.underpowered)}

    def record(self) -> DecisionRecord:
        """The decision as plain data, its harm effect included (a backtest's `metrics["decision"]`)."""
        return {"metric": self.metric, "effect": self.effect, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p_value": self.p_value, "n": self.n, "status": self.status, "reason": self.reason,
                "underpowered": self.underpowered, "mde": self.mde,
                "harm": self.harm.record() if self.harm is not None else None}


def _mde(e: Effect, min_gain: float, alpha: float, power_: float) -> float | None:
    """min_gain plus (z_{1-a/2} + z_power) standard errors, the SE read off the interval's width."""
    if e.n == 0:
        return None
    se = (e.ci_high - e.ci_low) / (2 * z(1 - alpha / 2))
    return min_gain + (z(1 - alpha / 2) + z(power_)) * se


def decide(effect: Effect, min_gain: float, harm: Effect | None = None, *, failure: str | None = None,
           min_effect: float | None = None, alpha: float = ALPHA, power_: float = POWER) -> Decision:
    """The gate's rule on one targeted effect (plus accuracy, when the change can move it).

    - `failure` (a crash, a validity block, no data) -> failed, whatever the numbers;
    - accuracy (`harm`) or the targeted metric significantly below zero -> failed;
    - the targeted metric's 95% lower bound above `min_gain` -> passed;
    - anything else -> inconclusive (never auto-promoted).
    `min_effect`: the gain the design should detect; when its MDE is larger the
    decision is flagged `underpowered` (the reason says so).
    """
    mde = _mde(effect, min_gain, alpha, power_)
    under = bool(min_effect is not None and (mde is None or mde > min_effect))

    def out(status: str, reason: str) -> Decision:
        if under and status != "failed":
            reason += f" (underpowered: n {effect.n} detects only gains >= {mde:.3f})" if mde is not None \
                else " (underpowered: no paired data)"
        return Decision(effect.metric, effect.effect, effect.ci_low, effect.ci_high, effect.p_value, effect.n,
                        status, reason, under, mde, harm)

    if failure:
        return out("failed", failure)
    if effect.n == 0:
        return out("failed", f"no paired {effect.metric} outcomes to judge")
    if harm is not None and harm.n and harm.effect < 0 and harm.p_value < alpha:
        return out("failed", f"significant harm: {harm.text()}")
    if effect.effect < 0 and effect.p_value < alpha:
        return out("failed", f"significantly worse: {effect.text()}")
    if effect.ci_low > min_gain:
        return out("passed", f"{effect.text()}: lower bound above min_gain {min_gain}")
    return out("inconclusive", f"{effect.text()}: lower bound does not clear min_gain {min_gain}")


# ---------------------------------------------------------------- power and sample size


def paired_sd(base: float, effect: float, rollouts: int = 1, discordance: float | None = None) -> float:
    """Standard deviation of one unit's paired difference (candidate minus incumbent mean).

    Without `discordance`, the arms' rollouts are treated as independent draws
    within a prompt: Var = (p1(1-p1) + p2(1-p2)) / rollouts. Prompt difficulty
    cancels in the difference; common random numbers make the arms agree more,
    so this overstates the variance (the design is conservative). With one
    outcome per unit and a known discordance rate psi: Var = psi - effect^2."""
    p2 = min(max(base, 0.0), 1.0)
    p1 = min(max(base + effect, 0.0), 1.0)
    if discordance is not None and rollouts == 1:
        var = discordance - effect ** 2
    else:
        var = (p1 * (1 - p1) + p2 * (1 - p2)) / max(rollouts, 1)
    return math.sqrt(max(var, 1e-12))


def power(n: int, effect: float, base: float = 0.5, min_gain: float = 0.0, rollouts: int = 1,
          alpha: float = ALPHA, discordance: float | None = None) -> float:
    """Chance that `n` paired units show a 95% lower bound above `min_gain` when the true gain is `effect`."""
    if n <= 0:
        return 0.0
    se = paired_sd(base, effect, rollouts, discordance) / math.sqrt(n)
    return _N.cdf((effect - min_gain) / se - z(1 - alpha / 2))


def sample_size(effect: float, base: float = 0.5, min_gain: float = 0.0, rollouts: int = 1,
                alpha: float = ALPHA, power_: float = POWER, discordance: float | None = None) -> int:
    """Paired units needed to detect a true gain `effect` (lower bound above `min_gain`).

        n = ((z_{1-alpha/2} + z_power) * sd / (effect - min_gain))^2

    >>> sample_size(0.1, base=0.5, min_gain=0.02, rollouts=8)
    76
    """
    if effect <= min_gain:
        raise ValueError(f"a gain of {effect} cannot clear min_gain {min_gain}")
    sd = paired_sd(base, effect, rollouts, discordance)
    return math.ceil(((z(1 - alpha / 2) + z(power_)) * sd / (effect - min_gain)) ** 2)


@dataclass(frozen=True)
class ProbePlan:
    tasks: int
    """Prompts per arm (the same prompts and sampling seeds in both arms)."""
    rollouts: int
    """Rollouts per prompt and arm."""
    required: int
    """Prompts the power calculation asks for."""
    power: float
    """Power at `tasks` to detect `min_effect`."""

    @property
    def underpowered(self) -> bool:
        return self.tasks < self.required


def probe_plan(min_effect: float, min_gain: float, rollouts: int, cpu_tasks: int, max_tasks: int,
               cuda: bool, base: float | None = None) -> ProbePlan:
    """How large a paired probe is: on CUDA as many prompts as the power calculation asks
    (at most `max_tasks`, at least `cpu_tasks`); on the CPU `cpu_tasks`, flagged underpowered.
    `base`: the incumbent's accuracy if known (else 0.5, the largest variance)."""
    p = 0.5 if base is None else base
    need = sample_size(min_effect, p, min_gain, rollouts)
    tasks = min(max_tasks, max(cpu_tasks, need)) if cuda else cpu_tasks
    return ProbePlan(tasks, rollouts, need, power(tasks, min_effect, p, min_gain, rollouts))


def replay_rows(min_effect: float, min_gain: float, group_size: int, base: float) -> int:
    """Stored rollouts a replay needs to detect a `min_effect` change of a reward's signal.

    Signal is paired over groups, and a reward fix acts on the groups holding a correct
    rollout (a recall fix) or a wrong one (a specificity fix). At accuracy `base` the rarer of the
    two kinds of group is informative with probability q = min(1-(1-base)^g, 1-base^g), so the
    replay needs `sample_size(min_effect, 0.5, min_gain) / q` groups of g rollouts.

    >>> replay_rows(0.1, 0.02, 8, 0.5)
    4832
    >>> replay_rows(0.1, 0.02, 8, 0.04)
    17264
    """
    g = max(1, group_size)
    b = min(max(base, 0.0), 1.0)
    informative = max(min(1 - (1 - b) ** g, 1 - b ** g), 1e-3)
    return math.ceil(sample_size(min_effect, 0.5, min_gain) / informative) * g

