"""The population: a small frontier of harness versions that proposals branch from.

    >>> members = frontier(store, k=4, labels=["no_answer_tag", "truncated"])   # doctest: +SKIP
    >>> [(m.version, m.status, round(m.score, 2)) for m in members]
    [(3, 'active', 2.1), (1, 'superseded', 0.9)]
    >>> parents = choose_parents(store, 4, labels, random.Random(0), n=4)   # doctest: +SKIP

Members are the active version and the best `k - 1` earlier ones that were
promoted and superseded (rolled-back versions are out: the run decided
against them). A member's score balances three things, as population-based
research agents do:

- productivity: how often its children passed their backtest, (passed + 1) / (children + 2);
- novelty: how little it has been branched from, 1 / (1 + children);
- coverage: the share of the current top failure modes that none of its
  children targeted yet.

score = productivity + 0.5 novelty + 0.5 coverage (+1 for the active version,
which also always gets the first slot, so the most direct fix is always
tried). Every member keeps its lineage: the chain of versions back to the
root (`lineage.lineage` explains each step).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, TypedDict



if TYPE_CHECKING:
    from backend.store import Store


GOOD = ("passed", "approved", "promoted", "rolled_back")
TOP_LABELS = 3


class MemberRow(TypedDict):
    """A member as reports and the TUI show it (`Member.to_dict`)."""

    version: int
    status: str
    parent: int | None
    children: int
    passed: int
    productivity: float
    novelty: float
    coverage: float
    score: float
    ancestry: list[int]


@dataclass(frozen=True)
class Member:
    """One frontier member: a harness version with its children's record and its ancestry."""

    version: int
    status: str
    code: str
    parent: int | None
    children: int
    passed: int
    productivity: float
    novelty: float
    coverage: float
    ancestry: tuple[int, ...]
    """Versions from this one back to the root, this one first."""

    @property
    def active(self) -> bool:
        return self.status == "active"

    @property
    def score(self) -> float:
        return self.productivity + 0.5 * self.novelty + 0.5 * self.coverage + (1.0 if self.active else 0.0)

    def to_dict(self) -> MemberRow:
        return {"version": self.version, "status": self.status, "parent": self.parent, "children": self.children,
                "passed": self.passed, "productivity": round(self.productivity, 3),
                "novelty": round(self.novelty, 3), "coverage": round(self.coverage, 3),
                "score": round(self.score, 3), "ancestry": list(self.ancestry)}


def _ancestry(version: int, parents: dict[int, int | None]) -> tuple[int, ...]:
    out: list[int] = []
    seen: set[int] = set()
    vid: int | None = version
    while vid is not None and vid not in seen:
        seen.add(vid)
        out.append(vid)
        vid = parents.get(vid)
    return tuple(out)


def members(store: Store, labels: Sequence[str]) -> list[Member]:
    """Every live version (active and superseded) as a scored member, active first. `labels`: the
    round's failure labels, most common first (coverage counts the first TOP_LABELS)."""
    versions = store.live_versions()
    parents = store.version_parents() if versions else {}
    kids = store.children_of([v["id"] for v in versions])
    top = list(labels[:TOP_LABELS])
    out = []
    for v in versions:
        ks = kids[v["id"]]
        good = sum(k["status"] in GOOD for k in ks)
        targeted = {k["target"] for k in ks}
        out.append(Member(
            version=v["id"], status=v["status"], code=v["code"], parent=v["parent"], children=len(ks), passed=good,
            productivity=(good + 1) / (len(ks) + 2), novelty=1 / (1 + len(ks)),
            coverage=sum(lbl not in targeted for lbl in top) / len(top) if top else 0.0,
            ancestry=_ancestry(v["id"], parents)))
    return out


def frontier(store: Store, k: int, labels: Sequence[str]) -> list[Member]:
    """The active version and the `k - 1` best-scoring earlier ones (ties: the newer first)."""
    everyone = members(store, labels)
    active = [m for m in everyone if m.active]
    rest = sorted((m for m in everyone if not m.active), key=lambda m: (-m.score, -m.version))
    return (active + rest)[:max(1, k)]


def frontier_now(store: Store, k: int) -> list[Member]:
    """The frontier as the newest round saw it (coverage against that round's failure table)."""
    return frontier(store, k, [e["label"] for e in store.latest_failure_table()])


def choose_parents(store: Store, k: int, labels: Sequence[str], rng: random.Random, n: int) -> list[Member]:
    """`n` parents for a round's slots: the active version first, the rest drawn from the
    frontier with probability proportional to score (a member may be drawn twice)."""
    front = frontier(store, k, labels)
    if not front:
        return []
    first = next((m for m in front if m.active), front[0])
    return [first] + rng.choices(front, weights=[m.score for m in front], k=max(0, n - 1))
