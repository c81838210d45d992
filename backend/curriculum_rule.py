"""The curriculum rule: move the level and the dataset mix toward groups with mixed verdicts.

`CURRICULUM["target_pass_rate"] = t` (0 or absent: the harness's fixed level)
asks the engine to keep the training groups' pass rate near t. Before each
training step the engine plans the step's curriculum from the records of the
steps before it (`steps.metrics_json["curriculum"]`), never from memory, so a
resumed run plans exactly what the uninterrupted one did:

- level: the previous step's level (the harness's `level` at the first step,
  or after the harness changed its level or target). Once the last `WINDOW`
  steps all ran at that level, their pooled group pass rate (mean over groups
  of the share of correct rollouts, datasets with levels only) moves it one
  down when below t - BAND and one up when above t + BAND, within the levels
  the environment has (`env.curriculum_levels()`).
- dataset mix (math, two or more datasets): each dataset's weight is the
  harness's weight times (MIX_FLOOR + the share of its groups over the last
  `WINDOW` steps with both verdicts); a dataset not drawn there counts as half
  mixed. No dataset with a weight goes to zero.

    >>> plan({"level": 1, "target_pass_rate": 0.3}, (0, 3), [], None)[0]["level"]
    1
    >>> hist = [{"level": 1, "base": 1, "target": 0.3, "tally": {"gcd": [8, 0, 0.0]}}] * 2
    >>> plan({"level": 1, "target_pass_rate": 0.3}, (0, 3), hist, None)[0]["level"]
    0
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

KEY = "curriculum"
"""The step metrics key of the record."""
WINDOW = 2
"""Steps at a level before the rule may move it (and the window the mix reads)."""
BAND = 0.1
"""Half-width of the target band."""
MIX_FLOOR = 0.1
"""A dataset's weight factor with no mixed group (so it is still drawn, and can be seen to change)."""
UNSEEN_MIXED = 0.5


def target(curriculum: dict[str, Any]) -> float:
    return float(curriculum.get("target_pass_rate", 0.0) or 0.0)


def plan(curriculum: dict[str, Any], levels: tuple[int, int], history: Sequence[dict[str, Any] | None],
         datasets: Sequence[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the step's curriculum, its record without the tally): `history` holds the records of the
    steps before it, oldest first (None for a step without one); `datasets`: the run's (math)."""
    t = target(curriculum)
    lo, hi = levels
    base = min(max(int(curriculum.get("level", lo)), lo), hi)
    ours = [r if r and r.get("base") == base and r.get("target") == t else None for r in history]
    level = int(ours[-1]["level"]) if ours and ours[-1] else base
    recent = ours[-WINDOW:]
    if len(recent) == WINDOW and all(r and r["level"] == level for r in recent):
        groups = sum(r["tally"][d][0] for r in recent for d in r["tally"] if _levelled(r, d))
        passed = sum(r["tally"][d][2] for r in recent for d in r["tally"] if _levelled(r, d))
        if groups:
            rate = passed / groups
            level += -1 if rate < t - BAND else (1 if rate > t + BAND else 0)
            level = min(max(level, lo), hi)
    out = dict(curriculum, level=level)
    record: dict[str, Any] = {"level": level, "base": base, "target": t}
    if datasets and len(datasets) > 1:
        out["datasets"] = record["datasets"] = mix(curriculum.get("datasets") or {}, datasets,
                                                   [r for r in history[-WINDOW:] if r])
    return out, record


def _levelled(record: dict[str, Any], dataset: str) -> bool:
    return dataset not in set(record.get("unlevelled", ()))


def mix(weights: dict[str, float], datasets: Sequence[str], recent: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The harness's dataset weights (uniform over the run's datasets where it names none of them)
    scaled toward the datasets whose recent groups were mixed."""
    named = {d: float(w) for d, w in weights.items() if d in datasets}
    base = named or {d: 1.0 for d in datasets}
    out = {}
    for d, w in base.items():
        g = sum(r["tally"].get(d, [0, 0, 0.0])[0] for r in recent)
        m = sum(r["tally"].get(d, [0, 0, 0.0])[1] for r in recent)
        out[d] = round(w * (MIX_FLOOR + (m / g if g else UNSEEN_MIXED)), 6)
    return out


def tally(items: Sequence[Any], has_levels) -> tuple[dict[str, list], list[str]]:
    """Per dataset (the task's `meta["dataset"]`, else its domain): [groups, groups with both
    verdicts, sum of group pass rates]; and the datasets without levels."""
    groups: dict[int, list[Any]] = {}
    for s in items:
        groups.setdefault(s.group, []).append(s)
    out: dict[str, list] = {}
    unlevelled = set()
    for members in groups.values():
        task = members[0].task
        d = str(task.meta.get("dataset") or task.domain)
        if not has_levels(task):
            unlevelled.add(d)
        ok = [bool(s.verdict.correct) for s in members]
        row = out.setdefault(d, [0, 0, 0.0])
        row[0] += 1
        row[1] += int(any(ok) and not all(ok))
        row[2] = round(row[2] + sum(ok) / len(ok), 6)
    return out, sorted(unlevelled)


def history(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The records of stored `steps` rows (oldest first), None where a step has none."""
    out = []
    for row in steps:
        try:
            m = json.loads(row.get("metrics_json") or "{}")
        except (TypeError, ValueError):
            m = {}
        out.append(m.get(KEY) if isinstance(m, dict) else None)
    return out


def for_step(store, env, curriculum: dict[str, Any], step: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The curriculum of training step `step`: the harness's own when its target is 0 (nothing is
    read or recorded), else the rule's plan from the stored steps before it, and its record."""
    if target(curriculum) <= 0 or not hasattr(env, "curriculum_levels"):
        return curriculum, None
    rows = store.window_steps(max(step - WINDOW, 1), step - 1)
    return plan(curriculum, env.curriculum_levels(), history(rows), getattr(env, "datasets", None))
