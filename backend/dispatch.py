"""The one place operator commands are applied, and the engine's checkpoints.

Every verb of `backend.commands` is applied by `apply_one`, which acknowledges
its command exactly once (applied or rejected, with the result), re-checking
it with `commands.check` against the state of that moment.

Where commands are applied:

- at a **checkpoint** (`Control.checkpoint`: between generation batches,
  between held-out evaluation batches, between candidates of a round, and,
  through `Control.honour`, before every decoder layer of every forward and
  backward pass of the policy) only the control verbs (pause, resume, stop):
  the harness of a step in flight never changes under it;
- at the **boundary between two steps** every verb (the loop passes an
  `EvolveContext`), and while the run is paused there, as they come.

A stop (a command, SIGTERM or SIGINT) raises `StopRequested` at the next
checkpoint; the loop unwinds the step in flight (nothing of it was committed)
and records the run as stopped, so `--resume` goes on from the last committed
step.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from backend.commands import CONTROL_VERBS, CommandRefused, check, intervention_id
from backend.store import Store, loads

if TYPE_CHECKING:
    from backend.evolve.context import EvolveContext


SETTINGS = {"auto_promote": "auto_promote", "pause": "paused", "resume": "paused"}
"""Verbs that set a value: of several waiting commands for one setting only the newest is applied
(the others are acknowledged as superseded), so a toggle pressed twice never passes through the
value in between (auto-promote on for a moment would promote a candidate)."""


class StopRequested(BaseException):
    """Raised at a checkpoint once a stop was asked for. A BaseException, like KeyboardInterrupt,
    so the `except Exception` that keeps a failing candidate from ending a round lets it through."""


class Control:
    """Stop, pause and "what the engine is doing now", shared by the loop and evolution."""

    POLL_S = 0.5
    """Inside a generation, the command table is read at most this often."""
    WAIT_S = 0.25
    """While paused, how often the command table is read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.stop_requested = False
        self.activity: str | None = None
        self.on_activity: Callable[[str | None], None] | None = None  # the terminal's status line
        self._polled = 0.0
        self._waiting: set[str] = set()  # the control verbs waiting in the table at the last look
        self._stop_only = False

    def request_stop(self) -> None:
        """From a signal handler: only a flag (the next checkpoint does the rest)."""
        self.stop_requested = True

    def report(self, activity: str | None) -> None:
        """Publish what the engine is doing now (the TUI's header shows it)."""
        if activity != self.activity:
            self.activity = activity
            self.store.set_run(activity=activity)
            if self.on_activity is not None:
                self.on_activity(activity)

    def interrupting(self) -> bool:
        """Cheap enough to ask once per generated token: a stop was asked for, or a pause or stop
        command waits (the table is read at most every POLL_S); inside `stop_only`, a stop only."""
        if self.stop_requested:
            return True
        now = time.monotonic()
        if now - self._polled >= self.POLL_S:
            self._polled = now
            self._waiting = {c["verb"] for c in self.store.pending_commands() if c["verb"] in ("pause", "stop")}
        return "stop" in self._waiting if self._stop_only else bool(self._waiting)

    @contextmanager
    def stop_only(self) -> Iterator[None]:
        """Inside: a stop is honoured as anywhere, a pause waits for the next checkpoint outside.
        For a data-parallel update: the other ranks wait for rank 0 in a collective, which has a
        timeout, so rank 0 must not wait out a pause there (backend/ddp/leader.py)."""
        self._stop_only = True
        try:
            yield
        finally:
            self._stop_only = False

    def honour(self) -> None:
        """Inside a long pass of the model (called before every decoder layer,
        `backend/policy/interrupt.py`): nothing unless a stop was asked for or a pause or stop
        command waits; then the checkpoint (wait out the pause in place, or raise StopRequested)."""
        if self.interrupting():
            self.checkpoint()

    def checkpoint(self, activity: str | None = None, context: Callable[[], "EvolveContext"] | None = None) -> None:
        """Apply waiting commands (control verbs only, or every verb given a `context`), wait here
        while the run is paused, and raise `StopRequested` once a stop was asked for."""
        if activity is not None:
            self.report(activity)
        if self._stop_only and not self.stop_requested and "stop" not in self._waiting:
            return  # a pause waits for the next checkpoint outside
        apply_pending(self, context)
        self._waiting = set()
        if self.store.run().get("paused") and not self.stop_requested:
            resume_to = self.activity
            self.report("paused")
            while self.store.run().get("paused") and not self.stop_requested:
                time.sleep(self.WAIT_S)
                apply_pending(self, context)
            self.report(resume_to)
        if self.stop_requested:
            self.report("stopping…")
            raise StopRequested()


def apply_pending(control: Control, context: Callable[[], "EvolveContext"] | None = None) -> list[dict]:
    """Apply the waiting commands in order (only control verbs without a `context`), each
    acknowledged once. Returns the commands as acknowledged."""
    out = []
    pending = control.store.pending_commands()
    newest = {SETTINGS[c["verb"]]: c["id"] for c in pending if c["verb"] in SETTINGS}
    for cmd in pending:
        if cmd["verb"] not in CONTROL_VERBS and context is None:
            continue
        setting = SETTINGS.get(cmd["verb"])
        if setting and newest[setting] != cmd["id"]:  # only the newest value of a setting counts
            status, result = "superseded", f"superseded by command {newest[setting]}"
            control.store.ack_command(cmd["id"], status, result)
        else:
            status, result = apply_one(control, cmd, context() if cmd["verb"] not in CONTROL_VERBS else None)
        out.append(dict(cmd, status=status, result=result))
    return out


def apply_one(control: Control, cmd: dict, ctx: "EvolveContext | None" = None) -> tuple[str, str]:
    """Apply one command and acknowledge it. Never raises for a bad command: it is rejected
    with the reason."""
    store = control.store
    verb = cmd["verb"]
    try:
        status, result = _apply(control, ctx, verb, loads(cmd.get("arg_json"), {}) or {})
    except CommandRefused as e:
        status, result = "rejected", str(e)
    except Exception as e:  # a bad command is answered, never raised into the loop
        status, result = "rejected", f"{type(e).__name__}: {e}"
    store.ack_command(cmd["id"], status, result[:500])
    store.log("info" if status == "applied" else "warning", f"command {cmd['id']} {verb}: {status} ({result})"[:600],
              kind="command", step=ctx.step if ctx else None)
    return status, result


def _apply(control: Control, ctx: "EvolveContext | None", verb: str, arg: dict) -> tuple[str, str]:
    store = control.store
    row = store.get("interventions", intervention_id(arg)) if verb in ("approve", "veto") else None
    arg = check(verb, arg, store.run(), row)
    if verb == "pause":  # status and activity in one write: a reader never sees one without the other
        store.set_run(paused=1, status="paused", activity="paused")
        return "applied", "paused"
    if verb == "resume":
        store.set_run(paused=0, status="running")
        return "applied", "resumed"
    if verb == "stop":
        control.stop_requested = True
        return "applied", "stopping at the next checkpoint"
    assert ctx is not None, f"{verb} needs the evolution context"
    from backend.evolve import operator_commands as operator

    if verb == "auto_promote":
        return "applied", operator.set_auto_promote(ctx, arg["on"])
    if verb == "veto":
        return "applied", operator.veto(ctx, arg["id"], arg["reason"])
    if verb == "approve":
        return operator.approve(ctx, arg["id"], rebase=bool(arg.get("rebase")),
                                inconclusive=bool(arg.get("inconclusive")))
    return _propose_edit(ctx, arg)


def _propose_edit(ctx: "EvolveContext", arg: dict) -> tuple[str, str]:
    """A hand edit of the harness file (from the TUI) becomes an intervention and is backtested."""
    from backend.evolve import submit

    res = submit(ctx, arg["code"], title=arg.get("title") or "operator edit of harness.py",
                 hypothesis=arg.get("hypothesis") or "hand edit by the operator", proposer="operator")
    return "applied", f"intervention #{res.id} backtest {res.status.value}: {res.reason}"[:300]
