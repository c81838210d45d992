"""When a population is stuck, and what its explore move must not repeat.

A comparison is stuck when the members' groups of the segment just trained
were mostly dead (every rollout of a group got the same reward, so GRPO learns
nothing from it): the dead groups of all members' `steps` rows over the last
`population.every` steps (`rollout.group_stats` stores each step's
`dead_group_frac` of its `n_groups`; a group only a hint revived counts as
dead, `dead_groups_of`), pooled, as a share with its 95% Wilson interval, at
least `population.stuck_dead_share`. The point share decides; the interval
and the groups are stored with the move (`store.Stuck`). Without the hint rule
a hint switched the stuck state off by itself: on a stuck math suite (lcm and
fraction_simplification) the member of each population that hinted went from
0.98-1.00 dead to 0.06-0.17 at the next comparison, which took the pooled share
under 0.9 while every member's validation stayed at 0.01-0.04, and no move was
drawn after that.

Dead groups alone do not make a population stuck while it still learns: with
`population.stuck_unless_rising` (the default), a comparison where the best
member's validation rose since its previous evaluation (paired, the interval
above 0) draws no move. Groups can stay almost all dead while the few mixed ones
still teach, and a move drawn then can spend a member that was not behind.

The members that move are ranked last first on validation (fewest correct on
the paired problems; ties: the highest index, so a population of equals moves
its last members and keeps m0 as it is): `population.stuck_movers` of them, by
default every member but the best. Each draws a different knob
(`coordinator._move`), so one stuck comparison tries several moves side by
side, and the best member's unchanged run is the population's fallback.

The population's lineage is its memory of what did not work: every knob move
whose outcome was tied or lost becomes a `TriedMove` that `explore.propose_move`
does not draw again in this population (the simple rule: not "until the policy
moved", which a stuck population's near-zero validation could not show anyway).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from backend.dead_groups import recorded
from backend.evolve.explore import TriedMove
from backend.evolve.stats import Effect, wilson_interval
from backend.store import Store

from .store import Event, Score, Stuck


def dead_groups_of(step_row: Mapping[str, Any]) -> tuple[int, int]:
    """(dead, groups) of one `steps` row, counting a group that only a hint revived as dead: the
    hint put part of the reference answer in its rollouts, so its mixed rewards say nothing of
    what the policy does alone (held-out sets never hint). A group that resampling revived is
    alive: the policy found the answer itself.

    >>> dead_groups_of({"n_groups": 64, "dead_group_frac": 0.5,
    ...                 "metrics_json": '{"dead_groups": {"dead_revived_by_hint": 20, "revived_by_resample": 3}}'})
    (52, 64)
    >>> dead_groups_of({"n_groups": 8, "dead_group_frac": 1.0, "metrics_json": None})
    (8, 8)
    """
    n = int(step_row["n_groups"] or 0)
    dead = round(float(step_row["dead_group_frac"] or 0.0) * n)
    moved = recorded(step_row)
    return min(n, dead + int(moved.get("dead_revived_by_hint", moved.get("revived_by_hint")) or 0)), n


def dead_share(run_dirs: Sequence[Path], first: int, last: int, threshold: float) -> Stuck:
    """The members' pooled dead groups over steps `first`..`last` (`dead_groups_of` each step)."""
    dead = groups = 0
    for d in run_dirs:
        s = Store.open(d, readonly=True)
        try:
            for row in s.window_steps(first, last):
                k, n = dead_groups_of(row)
                dead, groups = dead + k, groups + n
        finally:
            s.close()
    lo, hi = wilson_interval(dead, groups) if groups else (0.0, 1.0)
    return Stuck(dead, groups, round(dead / groups, 4) if groups else 0.0, round(lo, 4), round(hi, 4),
                 first, last, threshold)


def is_stuck(s: Stuck) -> bool:
    return s.groups > 0 and s.share >= s.threshold


def still_learning(rise: Effect | None) -> bool:
    """The best member's validation rose since its previous evaluation: its interval lies above 0.

    >>> from backend.evolve.stats import paired_binary
    >>> still_learning(paired_binary([False] * 40, [True] * 10 + [False] * 30)), still_learning(None)
    (True, False)
    """
    return rise is not None and rise.ci_low > 0


def _last_first(s: Score) -> tuple[int, int]:
    """Ranks members from last on validation: fewest correct, ties to the highest index."""
    return s.correct, -s.member


def movers(scores: Sequence[Score], count: int) -> list[Score]:
    """The members that move at a stuck comparison: `count` of them (0: all but the best), last
    on validation first, never the best.

    >>> from backend.population.store import Score
    >>> sc = lambda m, c, best=False: Score(10, m, 10, c, c / 10, best, 0.0, 0.0, 0.0, False)
    >>> [s.member for s in movers([sc(0, 0, True), sc(1, 0), sc(2, 0)], 0)]
    [2, 1]
    >>> [s.member for s in movers([sc(0, 1), sc(1, 3, True), sc(2, 2)], 1)]
    [0]
    """
    ranked = sorted((s for s in scores if not s.best), key=_last_first)
    return ranked if count <= 0 else ranked[:count]


def knobs_taken(events: Sequence[Event], step: int) -> list[str]:
    """The knobs that the moves of comparison `step` already drew (a move not drawn yet, or one
    that failed, takes none)."""
    return [e.knob for e in events if e.kind == "move" and e.step == step and e.knob and e.status != "failed"]


def tried_moves(events: Sequence[Event]) -> list[TriedMove]:
    """The population's knob moves that then tied or lost, oldest first."""
    return [TriedMove(e.knob, str(e.old_value), str(e.new_value)) for e in events
            if e.kind == "move" and e.knob and e.outcome in ("tied", "lost")]
