"""The operator's decisions on explore moves of a supervised population.

In supervised mode a gated move waits as `pending` in population.sqlite while
its member trains on with the harness it copied. `approve` marks it approved:
the coordinator applies it at the next segment boundary, when the member is
not training (unless a later copy changed the member's harness meanwhile).
`veto` marks it vetoed, and its intervention in the member's run too.
"""

from __future__ import annotations

from pathlib import Path

from backend.errors import UsageError
from backend.evolve import interventions as iv
from backend.store import Store

from .store import PopulationStore


def _pending(ps: PopulationStore, event_id: int) -> None:
    e = ps.event(event_id)
    if e is None or e.kind != "move":
        raise UsageError(f"population {ps.path.parent} has no move #{event_id}")
    if e.status != "pending":
        raise UsageError(f"move #{event_id} is {e.status}; only a pending move can be approved or vetoed")


def approve(pop: str | Path, event_id: int) -> str:
    """Approve a pending move; the coordinator applies it at the next segment boundary. Its line."""
    ps = PopulationStore.open(pop)
    try:
        _pending(ps, event_id)
        ps.set_event(event_id, "approved")
    finally:
        ps.close()
    return f"move #{event_id} approved: it applies at the next segment boundary"


def veto(pop: str | Path, event_id: int) -> str:
    """Veto a pending move (and its intervention in the member's run). Its line."""
    ps = PopulationStore.open(pop)
    try:
        _pending(ps, event_id)
        e = ps.event(event_id)
        assert e is not None
        ps.set_event(event_id, "vetoed")
        run_dir = ps.member_dir(e.member)
    finally:
        ps.close()
    if e.intervention_id is not None:
        store = Store.open(run_dir, create=False)
        try:
            if iv.get(store, e.intervention_id).status in ("passed", "approved"):
                iv.transition(store, e.intervention_id, "vetoed", f"population move #{event_id} vetoed")
        finally:
            store.close()
    return f"move #{event_id} vetoed"
