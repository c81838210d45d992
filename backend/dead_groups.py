"""Engine-side moves on dead groups: resampling them and hinting them.

A group is dead when its rewards all tie: GRPO learns nothing from it. Two
sampling settings of the harness (validated in backend/harness/spec.py) tell
the engine to act on a training step's dead groups after the step's draw;
held-out evaluations, probes and replays never do (they do not call `revive`):

- `SAMPLING["resample_dead"] = n` (dynamic sampling): a dead group is drawn
  again, up to n times, until its rewards differ; the last draw replaces it.
- `SAMPLING["hint"] = share`: a group whose rollouts are all wrong by the
  evaluator is drawn again with the first `share` of the task's reference
  solution (the env's `reference_solution`, engine-side data the harness never
  sees) placed at the start of the model's answer. The prefix tokens are not
  trained on (loss mask 0); the completion after them is. The hinted group
  replaces the wrong one in training.

Every rollout drawn counts in the step's rollout count (`Revival.drawn`), so a
comparison at equal rollouts charges the moves for what they drew. Each redraw
has its own seed derived from (run seed, step, round): a resumed run draws what
the original drew.

The redraws come out of the step's budget (`train.revival_budget = "within"`,
the default): the step draws fewer fresh tasks, keeping back `reserve` groups
(as many as the previous step wanted redrawn, at most half the step; none on a
run's first step), and its redraws stop when the reserve is spent, so a step
never draws more than tasks_per_step x group_size rollouts and a run with these
moves spends at most what a run without them does. `"extra"` draws a full step
of fresh tasks and the redraws on top (dynamic sampling as usually run: more
rollouts a step).

    >>> Moves.of({"temperature": 1.0}).active
    False
    >>> Moves.of({"hint": 0.5, "resample_dead": 2})
    Moves(hint=0.5, resample_dead=2)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.envs.base import Task
from backend.harness.semantics import group_batch
from backend.types import Generation

HINT_ROUND = 15
"""The redraw round whose seed the hint draw uses (resample rounds are 0..3)."""
HINT_MAX_SHARE_OF_BUDGET = 0.5
"""A hint prefix takes at most this share of the token budget; the model writes the rest."""


@dataclass(frozen=True)
class Moves:
    """The harness's dead-group settings (absent: 0, nothing happens)."""

    hint: float = 0.0
    resample_dead: int = 0

    @classmethod
    def of(cls, sampling: dict[str, Any]) -> "Moves":
        return cls(float(sampling.get("hint", 0.0)), int(sampling.get("resample_dead", 0)))

    @property
    def active(self) -> bool:
        return self.hint > 0 or self.resample_dead > 0


KEY = "dead_groups"
"""Where a step's `Revival` is stored in its `steps.metrics_json` (absent: no move ran)."""


def recorded(step_row: Mapping[str, Any]) -> dict[str, Any]:
    """What the moves did at a stored step (`Revival.to_dict`), {} where none ran."""
    return json.loads(step_row["metrics_json"] or "{}").get(KEY) or {}


@dataclass
class Revival:
    """What the moves did in one step: the stored summary (`steps.metrics_json[KEY]`)."""

    drawn: int = 0
    """Rollouts drawn in all, the step's first draw included."""
    resample_rounds: int = 0
    resampled_groups: int = 0
    """Group draws made by resampling (a group drawn twice counts twice)."""
    revived_by_resample: int = 0
    hinted_groups: list[int] = field(default_factory=list)
    hint_tokens: dict[int, int] = field(default_factory=dict)
    """{group: prefix tokens} of the hinted groups."""
    revived_by_hint: int = 0
    """Hinted groups that are no longer all wrong."""
    dead_revived_by_hint: int = 0
    """Groups dead before the hint and mixed after it: what a hint alone made trainable."""
    wanted: int = 0
    """Groups the step's first draw left for the moves (dead for resampling; all wrong with a
    hint to give, for a hint alone): what the next step keeps back for redraws under the
    "within" budget (`reserve`)."""
    reserved: int | None = None
    """Group draws this step kept back for redraws ("within"); None: redraws on top ("extra")."""

    def to_dict(self) -> dict[str, Any]:
        return {"drawn": self.drawn, "resample_rounds": self.resample_rounds,
                "resampled_groups": self.resampled_groups, "revived_by_resample": self.revived_by_resample,
                "hinted_groups": self.hinted_groups, "hint_tokens": {str(g): k for g, k in self.hint_tokens.items()},
                "revived_by_hint": self.revived_by_hint, "dead_revived_by_hint": self.dead_revived_by_hint,
                "wanted": self.wanted, "reserved": self.reserved}


def reserve(previous: Mapping[str, Any] | None, tasks: int) -> int:
    """Groups of a step's `tasks` kept back for redraws under the "within" budget: as many as the
    previous step's first draw left for the moves (its `wanted`; before any move ran, its dead
    groups), at most half the step; none on a run's first step (nothing to go by: its own
    `wanted` sets the second step's).

    >>> reserve({"n_groups": 64, "dead_group_frac": 0.25, "metrics_json": None}, 64)
    16
    >>> reserve({"n_groups": 40, "dead_group_frac": 0.1, "metrics_json": '{"dead_groups": {"wanted": 39}}'}, 64)
    32
    >>> reserve(None, 64)
    0
    """
    if previous is None:
        return 0
    wanted = recorded(previous).get("wanted")
    if wanted is None:
        wanted = round(float(previous["dead_group_frac"] or 0.0) * int(previous["n_groups"] or 0))
    return min(tasks // 2, int(wanted))


def redraw_seed(seed: int, step: int, round_: int) -> int:
    """The torch seed of redraw `round_` of `step`: apart from every step's own seed
    (seed * 1_000_003 + step, below 2**40 for any run)."""
    return 2**40 + (seed * 1_000_003 + step) * 32 + round_


def dead_groups(items: Sequence[Any]) -> list[int]:
    """Groups of a scored batch whose rewards tie (semantics.group_batch: the one place)."""
    groups = group_batch([(s.group,) for s in items], [s.reward for s in items])
    return [g.key[0] for g in groups if g.dead]


def all_wrong_groups(items: Sequence[Any]) -> list[int]:
    """Groups in which the evaluator called every rollout wrong."""
    wrong: dict[int, bool] = {}
    for s in items:
        wrong[s.group] = wrong.get(s.group, True) and not s.verdict.correct
    return [g for g, w in wrong.items() if w]


def hint_prefix(reference_ids: list[int], share: float, max_new_tokens: int) -> list[int]:
    """The first `share` of the reference's tokens, at most half the token budget.

    >>> hint_prefix(list(range(10)), 0.35, 128)
    [0, 1, 2]
    >>> hint_prefix(list(range(10)), 0.9, 8)
    [0, 1, 2, 3]
    """
    k = min(int(share * len(reference_ids)), int(max_new_tokens * HINT_MAX_SHARE_OF_BUDGET))
    return reference_ids[:max(k, 0)]


def prefixed(generate: Callable[..., list[Generation]], prefixes: dict[tuple[int, ...], list[int]],
             decode: Callable[[list[int]], str]) -> Callable[..., list[Generation]]:
    """`generate`, with the prompts found in `prefixes` continued from their prefix: the model
    generates after the prompt and the prefix (within the budget less the prefix), and the
    generation returned starts with the prefix (ids and text), as if the model had written it."""

    def gen(prompts: list[list[int]], max_new_tokens: int, temperature: float, top_p: float) -> list[Generation]:
        out: list[Generation | None] = [None] * len(prompts)
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_len.setdefault(len(prefixes.get(tuple(p), ())), []).append(i)
        for k, idx in sorted(by_len.items()):  # one batch per prefix length: one budget each
            pre = [prefixes.get(tuple(prompts[i]), []) for i in idx]
            gens = generate([list(prompts[i]) + p for i, p in zip(idx, pre)], max(max_new_tokens - k, 1),
                            temperature, top_p)
            for i, p, g in zip(idx, pre, gens):
                out[i] = g if not p else Generation(list(p) + list(g.ids), decode(p) + g.text, g.finish,
                                                    None if g.logprobs is None else [0.0] * len(p) + g.logprobs)
        return [g for g in out if g is not None]
    return gen


def mask_prefixes(items: Sequence[Any], prefix_len: dict[str, int]) -> None:
    """Loss mask 0 on the hint prefix of each hinted rollout (`prefix_len`: task id -> tokens)."""
    for s in items:
        k = prefix_len.get(s.task.id, 0)
        if k:
            s.loss_mask = [0] * k + list(s.loss_mask[k:])


def references(env: Any, prompt: dict[str, str], tokenizer: Any) -> Callable[[Task], list[int] | None]:
    """task -> the token ids of its reference solution in the harness's answer format (the env's
    `reference_solution`, with the <answer> tag where the harness's PROMPT asks for it), or None."""
    reference = getattr(env, "reference_solution", None)
    tagged = "<answer>" in prompt.get("system", "") + prompt.get("template", "")

    def ids(task: Task) -> list[int] | None:
        text = reference(task, answer_tag=tagged) if reference else None
        return tokenizer.encode(text, add_special_tokens=False) if text else None
    return ids


Draw = Callable[[list[Task], list[int], int, dict[str, list[int]] | None], list[Any]]
"""draw(tasks, their group ids, redraw round, hint prefixes by task id or None) -> scored items."""


def revive(items: list[Any], tasks: list[Task], moves: Moves, draw: Draw,
           references: Callable[[Task], list[int] | None], max_new_tokens: int,
           budget: int | None = None) -> tuple[list[Any], Revival]:
    """Resample the step's dead groups, then hint the groups still all wrong; returns the items
    trained on (one group per task, in group order) and what was done. `references(task)`: the
    reference solution's token ids, or None where the task has none. `budget`: group draws the
    redraws may make in all (the step's reserve; None: no limit), the lowest group ids first."""
    rev = Revival(drawn=len(items), reserved=budget)

    def hints(batch: list[Any]) -> dict[int, list[int]]:
        """{group: its hint prefix} for the all-wrong groups of `batch` that have one to give."""
        out = {}
        for g in sorted(all_wrong_groups(batch)):
            ref = references(tasks[g])
            pre = hint_prefix(ref, moves.hint, max_new_tokens) if ref else []
            if pre:
                out[g] = pre
        return out

    early = hints(items) if moves.hint > 0 and not moves.resample_dead else None  # no resampling: final
    rev.wanted = len(dead_groups(items)) if moves.resample_dead else len(early or {})
    left = budget

    def spend(gids: list[int]) -> list[int]:
        nonlocal left
        if left is None:
            return gids
        gids = gids[:left]
        left -= len(gids)
        return gids

    groups = _by_group(items)
    for r in range(moves.resample_dead):
        dead = spend(sorted(dead_groups(items)))
        if not dead:
            break
        new = _by_group(draw([tasks[g] for g in dead], dead, r, None))
        rev.resample_rounds, rev.resampled_groups, rev.drawn = r + 1, rev.resampled_groups + len(dead), \
            rev.drawn + sum(len(v) for v in new.values())
        groups.update(new)
        items = _flat(groups)
        rev.revived_by_resample += len(set(dead) - set(dead_groups(items)))
    if moves.hint > 0:
        prefixes = early if early is not None else hints(items)  # after resampling: its groups
        hinted = spend(sorted(prefixes))
        if hinted:
            dead_before = set(dead_groups(items))
            new = _by_group(draw([tasks[g] for g in hinted], hinted, HINT_ROUND,
                                 {tasks[g].id: prefixes[g] for g in hinted}))
            rev.drawn += sum(len(v) for v in new.values())
            rev.hinted_groups, rev.hint_tokens = hinted, {g: len(prefixes[g]) for g in hinted}
            groups.update(new)
            items = _flat(groups)
            rev.revived_by_hint = len(set(hinted) - set(all_wrong_groups(items)))
            rev.dead_revived_by_hint = len(set(hinted) & dead_before - set(dead_groups(items)))
    return items, rev


def _by_group(items: Sequence[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for s in items:
        out.setdefault(s.group, []).append(s)
    return out


def _flat(groups: dict[int, list[Any]]) -> list[Any]:
    return [s for g in sorted(groups) for s in sorted(groups[g], key=lambda s: s.idx)]
