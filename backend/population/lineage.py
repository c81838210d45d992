"""The population's lineage as the operator reads it, and the skills its won moves become.

`segment_line` is the one line a comparison prints; `learn_skill` turns a move
whose member then beat its parent (paired validation interval above 0) into a
skill card in that member's run (`evolve/skills.py`), with that interval as
its evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from backend.evolve import interventions as iv
from backend.evolve import skills as sk
from backend.evolve.edit import definition
from backend.store import Store

from .store import Event, Outcome, Score


def _score_text(s: Score) -> str:
    if s.best:
        return f"m{s.member} {s.acc:.3f} best"
    mark = " behind" if s.behind else ""
    return f"m{s.member} {s.acc:.3f} ({s.diff:+.3f} [{s.low:+.3f}, {s.high:+.3f}]){mark}"


def _short(value: str | None, width: int = 32) -> str:
    text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _event_text(e: Event) -> str:
    if e.kind == "copy":
        return f"m{e.member}<-m{e.parent} {e.status}"
    what = f"{e.knob} {_short(e.old_value)}->{_short(e.new_value)}" if e.knob else "no move"
    stuck = f" stuck (dead {e.stuck.share:.2f} of {e.stuck.groups} groups)" if e.stuck else ""
    return f"m{e.member} {what} {e.status}{stuck}" + (f" ({e.error})" if e.error and not e.knob else "")


def segment_line(step: int, scores: Sequence[Score], events: Sequence[Event]) -> str:
    """`step 4: validation n=32: m0 0.406 best | m1 0.219 (-0.188 [-0.33, -0.05]) behind; copies:
    m1<-m0 applied; moves: m1 TRAIN.temperature 0.8->1.0 applied`"""
    n = scores[0].n if scores else 0
    parts = [f"step {step}: validation n={n}: " + " | ".join(_score_text(s) for s in scores)]
    copies = [_event_text(e) for e in events if e.kind == "copy"]
    moves = [_event_text(e) for e in events if e.kind == "move"]
    parts.append("copies: " + (", ".join(copies) or "none"))
    if moves:
        parts.append("moves: " + ", ".join(moves))
    return "; ".join(parts)


def learn_skill(run_dir: Path, e: Event, out: Outcome) -> int | None:
    """A skill card in the member's run from a move that won; its id (None: nothing to learn)."""
    if e.intervention_id is None:
        return None
    store = Store.open(run_dir, create=False)
    try:
        row = iv.get(store, e.intervention_id)
        p = row.params
        name = p.get("name") or (row.names or [""])[0]
        domain = store.run().get("domain") or ""
        card = {"name": p.get("template") or f"{row.kind}-{row.target or 'general'}", "domain": domain,
                "trigger": {"labels": [row.target] if row.target else [], "signature": e.diagnosis or "",
                            "domain": domain},
                "change": {"op": "replace", "name": name, "source": definition(row.code, name) or "",
                           "kind": row.kind, "template": p.get("template"), "title": row.title,
                           "hypothesis": row.hypothesis, "expected": row.expected},
                "evidence": {"runs": [store.run().get("name") or str(run_dir)], "deltas": [round(out.diff, 4)],
                             "interventions": [row.id],
                             "gains": [{"effect": round(out.diff, 4), "ci_low": round(out.low, 4),
                                        "ci_high": round(out.high, 4), "n": out.n, "test": "mcnemar-exact",
                                        "against": f"m{e.parent} (population parent)"}]},
                "uses": 0, "helped": 1}
        typed = sk.validate(card, f"population move e{e.id}")
        card_name, _ = sk.upsert(store, typed, source=f"population:{run_dir.parent.name}")
        got = store.skill_row(card_name)
        return int(got["id"]) if got else None
    finally:
        store.close()
