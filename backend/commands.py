"""Operator commands: what each verb means, and the one check every command passes.

A command is a row in `commands` that states its intent, so applying it never
depends on what the engine happens to hold when it gets there:

    approve       {"id": 6, "base": 2}               the harness version the operator saw it built on
                  {"id": 6, "base": 2, "rebase": true}  re-apply its change onto the active version first
                  {"id": 6, "base": 2, "inconclusive": true}
    veto          {"id": 6, "reason": "why"}         a reason is required
    auto_promote  {"on": true}                       an absolute value, never "toggle"
    pause, resume, stop  {}
    propose_edit  {"code": "...", "title": "..."}    a hand edit of harness.py

`check` is the validation the CLI and the TUI run before writing a command
(a refusal is one line, at once) and the engine runs again when it applies it
(`backend/dispatch.py`), against the state of that moment. It reads plain
rows only, so the TUI can call it without the engine.

    >>> check("veto", {"id": 3, "reason": " "}, {"harness_version": 2}, {"id": 3, "status": "passed"})
    Traceback (most recent call last):
    ...
    backend.commands.CommandRefused: a veto needs a reason (it is recorded with intervention #3)
"""

from __future__ import annotations

from backend.errors import EvoError

VERBS = ("approve", "veto", "auto_promote", "pause", "resume", "stop", "propose_edit")
CONTROL_VERBS = frozenset({"pause", "resume", "stop"})
"""Verbs the engine honours at every checkpoint (between generation and evaluation batches and
between candidates); the others change the harness and wait for the boundary between two steps."""
APPROVABLE = frozenset({"passed", "inconclusive"})
VETOABLE = frozenset({"proposed", "backtesting", "passed", "inconclusive"})
LIVE_STATUSES = frozenset({"created", "running", "paused"})


class CommandRefused(EvoError):
    """A command that cannot be carried out as stated; the message says why and what to do."""


def stale_base(intervention: dict, active: int | None) -> str | None:
    """What approving a candidate built on an older harness would drop, or None when its base
    is the active version.

    >>> stale_base({"parent_version": 2}, 3)
    "built on v2; v3 is active: approving drops v3's change"
    """
    base = intervention.get("parent_version")
    if base is None or active is None or int(base) == int(active):
        return None
    return f"built on v{base}; v{active} is active: approving drops v{active}'s change"


def intervention_id(arg: dict) -> int:
    """The intervention a command names (`id`, also accepted as `#6` or a string)."""
    raw = arg.get("id")
    try:
        return int(str(raw).lstrip("#"))
    except (TypeError, ValueError):
        raise CommandRefused(f"expected an intervention id, got {raw!r}") from None


def check(verb: str, arg: dict, run: dict, intervention: dict | None = None) -> dict:
    """The command as it is to be written (intent made explicit), or `CommandRefused`.

    `run` is the runs row (harness_version, status, paused); `intervention` the row an approve or
    veto names (None when there is none)."""
    if verb not in VERBS:
        raise CommandRefused(f"unknown command '{verb}' (one of {', '.join(VERBS)})")
    if verb in ("approve", "veto"):
        return _check_decision(verb, arg, run, intervention)
    if verb == "auto_promote":
        if not isinstance(arg.get("on"), bool):
            raise CommandRefused(f"auto_promote needs on: true or false, got {arg.get('on')!r}")
        return {"on": arg["on"]}
    if verb in CONTROL_VERBS:
        status = run.get("status") or "created"
        if status not in LIVE_STATUSES:
            raise CommandRefused(f"the run is {status}; there is nothing to {verb}")
        return {}
    code = arg.get("code")
    if not isinstance(code, str) or not code.strip():
        raise CommandRefused("propose_edit needs the harness code")
    return dict(arg)


def _check_decision(verb: str, arg: dict, run: dict, row: dict | None) -> dict:
    iid = intervention_id(arg)
    if row is None:
        raise CommandRefused(f"no intervention #{iid}")
    status = row["status"]
    if verb == "veto":
        reason = str(arg.get("reason") or "").strip()
        if not reason:
            raise CommandRefused(f"a veto needs a reason (it is recorded with intervention #{iid})")
        if status not in VETOABLE:
            raise CommandRefused(f"intervention #{iid} is {status}; only a queued intervention can be vetoed")
        return {"id": iid, "reason": reason}
    if status not in APPROVABLE:
        raise CommandRefused(f"intervention #{iid} is {status}; only a passed (or, explicitly, an inconclusive) "
                             "intervention can be approved")
    inconclusive = bool(arg.get("inconclusive"))
    if status == "inconclusive" and not inconclusive:
        raise CommandRefused(f"intervention #{iid} is inconclusive ({row.get('reason') or 'no clear gain'}); "
                             "approve it explicitly (--inconclusive, or A in the TUI)")
    base = row.get("parent_version")
    if arg.get("base") is not None and base is not None and int(arg["base"]) != int(base):
        raise CommandRefused(f"intervention #{iid} is now built on v{base}, not v{arg['base']} "
                             "(it was rebased): review it again")
    rebase = bool(arg.get("rebase"))
    drop = stale_base(row, run.get("harness_version"))
    if drop and not rebase:
        raise CommandRefused(f"intervention #{iid} is {drop}. Confirm a rebase (evotui approve RUN ID --rebase, "
                             "or the TUI's dialog): its change is re-applied onto the active version and "
                             "backtested again")
    out = {"id": iid, "base": base}
    if rebase and drop:
        out["rebase"] = True
    if inconclusive:
        out["inconclusive"] = True
    return out
