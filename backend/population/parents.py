"""Which member a member clearly behind copies: productivity, novelty and coverage.

The candidates are the members not clearly behind at this comparison (each is
statistically level with the best). Each is scored as `evolve/frontier.py`
scores harness versions, with the population's lineage as its record:

- productivity: how often the member's own past copies and moves then won at
  the next comparison, (won + 1) / (decided + 2);
- novelty: how rarely others copied it, 1 / (1 + times copied from);
- coverage: the share of its top failure labels (the failure table of its
  last segment's rollouts, the first TOP_LABELS) that no move in the
  population targeted yet: a parent whose failures nobody tried to fix leaves
  the explore move the most to work on.

    score = productivity + 0.5 novelty + 0.5 coverage + ACC_WEIGHT * validation accuracy

The accuracy term (at this comparison, over the paired problems) breaks ties
toward the stronger member without making the choice "always the best".
The highest score wins; ties go to the lower index, so the choice is
deterministic and a resume makes the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from backend.evolve.diagnose import failure_table
from backend.store import Store

from .store import Event, Score

TOP_LABELS = 3
ACC_WEIGHT = 0.5


@dataclass(frozen=True)
class ParentScore:
    member: int
    productivity: float
    novelty: float
    coverage: float
    acc: float

    @property
    def score(self) -> float:
        return self.productivity + 0.5 * self.novelty + 0.5 * self.coverage + ACC_WEIGHT * self.acc


def top_labels(run_dir: Path, step: int, window: int) -> list[str]:
    """The most common failure labels of a member's rollouts in the `window` steps up to `step`."""
    s = Store.open(run_dir, readonly=True)
    try:
        table = failure_table(s, range(max(1, step - window + 1), step + 1))
    finally:
        s.close()
    return [row["label"] for row in table[:TOP_LABELS]]


def parent_score(member: int, acc: float, events: Sequence[Event], labels: Sequence[str]) -> ParentScore:
    """`member`'s score as a parent, from the population's events and its own failure labels."""
    own = [e for e in events if e.member == member and e.outcome is not None]
    won = sum(e.outcome == "won" for e in own)
    copied = sum(e.kind == "copy" and e.parent == member and e.status == "applied" for e in events)
    targeted = {e.target for e in events if e.kind == "move" and e.target}
    coverage = sum(lbl not in targeted for lbl in labels) / len(labels) if labels else 0.0
    return ParentScore(member, (won + 1) / (len(own) + 2), 1 / (1 + copied), coverage, acc)


def choose_parent(scores: Sequence[Score], events: Sequence[Event],
                  labels: dict[int, list[str]]) -> ParentScore | None:
    """The best-scoring member not clearly behind (None: every member is behind, which the
    pairing against the best rules out)."""
    cands = [parent_score(s.member, s.acc, events, labels.get(s.member, [])) for s in scores if not s.behind]
    if not cands:
        return None
    return max(sorted(cands, key=lambda c: c.member), key=lambda c: c.score)
