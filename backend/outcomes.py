"""What a held-out evaluation or an evolution round decided, as lines for the terminal.

Read from what the engine already returns and stores, never recomputed: an
evaluation's per-problem results, and for a round the rows it wrote (the
`rounds` summary, each intervention's status and its latest backtest's
statistics). `mark` notes the store's evolution state before a round or a
post-evaluation check; `changes` lists what is new since then.

    before = mark(store)
    effects = hooks.evolution_round(engine, step)
    progress.outcome(changes(store, before))
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.store import Store
from backend.types import Backtest, Intervention

TITLE_CHARS = 60


@dataclass(frozen=True)
class Mark:
    """The evolution state at one moment: the last round, each intervention's status, the skills."""

    last_round: int
    statuses: dict[int, str]
    skills: frozenset[str]


def mark(store: Store) -> Mark:
    rounds = store.round_ids()
    return Mark(rounds[-1] if rounds else 0, {iv.id: iv.status for iv in store.interventions()}, _skills(store))


def changes(store: Store, before: Mark) -> list[str]:
    """A line per round finished since `before`, per intervention new or changed since, per skill learned."""
    lines = [f"round at step {r['step']}: {r['summary']}" for rid in store.round_ids() if rid > before.last_round
             if (r := store.round(rid)) is not None]
    moved: list[tuple[int, int, str]] = []  # (harness version, id, line): promotions in the order made
    for iv in store.interventions():
        old = before.statuses.get(iv.id)
        if old is None:
            lines.append(f"  #{iv.id} {_title(iv)}: {decision(store.latest_backtest(iv.id), iv)}")
        if iv.status != old:
            moved += [(iv.child_version or 0, iv.id, line) for line in _status_lines(iv, old)]
    lines += [line for *_, line in sorted(moved)]
    lines += [f"  skill '{name}' learned" for name in sorted(_skills(store) - before.skills)]
    return lines


def _skills(store: Store) -> frozenset[str]:
    return frozenset(r["name"] for r in store.skill_rows())


def decision(bt: Backtest | None, iv: Intervention) -> str:
    """`passed (replay): accuracy +0.125 [+0.050, +0.200], n 64`, or the failure's reason."""
    if bt is None:
        return f"{iv.status}: {_short(iv.reason or 'not backtested')}"
    if bt.effect is None or bt.ci_low is None or bt.ci_high is None:
        return f"{bt.verdict} ({bt.mode}): {_short(bt.reason)}"
    weak = ", underpowered" if bt.underpowered else ""
    return (f"{bt.verdict} ({bt.mode}): {bt.metric} {bt.effect:+.3f} [{bt.ci_low:+.3f}, {bt.ci_high:+.3f}], "
            f"n {bt.n}{weak}")


def _status_lines(iv: Intervention, old: str | None) -> list[str]:
    if iv.status == "promoted":
        return [f"  promoted #{iv.id} as harness v{iv.child_version}: {_title(iv)}"]
    if iv.status == "rolled_back":
        return [f"  rolled back #{iv.id} ({_title(iv)}): {_short(iv.reason or '')}"]
    if iv.status == "passed":
        return [f"  #{iv.id} waits for the operator (evotui approve RUN {iv.id}, or the TUI's screen 4)"]
    if old is not None and iv.status in ("inconclusive", "failed", "vetoed", "approved"):
        return [f"  #{iv.id} {_title(iv)}: {old} -> {iv.status}"]
    return []


def eval_lines(step: int, results: dict[str, list[dict]]) -> list[str]:
    """Both held-out sets' accuracy with its count and 95% Wilson interval, labelled by what reads it."""
    from backend.evolve.stats import wilson_interval

    role = {"validation": "read by the gate", "test": "reported only"}
    where = "start" if step == 0 else f"step {step}"
    out = []
    for split in ("validation", "test"):
        rows = results.get(split) or []
        k, n = sum(bool(r["correct"]) for r in rows), len(rows)
        lo, hi = wilson_interval(k, n)
        out.append(f"{split} accuracy at {where}: {k / max(n, 1):.3f} ({k} of {n}, 95% CI {lo:.3f}-{hi:.3f}; "
                   f"{role[split]})")
    return out


def _title(iv: Intervention) -> str:
    t = iv.title if len(iv.title) <= TITLE_CHARS else iv.title[:TITLE_CHARS - 3] + "..."
    return f"{t} [{iv.proposer}]"


def _short(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
