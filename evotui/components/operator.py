"""The operator's actions (approve, veto, auto-promote, pause, stop), mixed into `EvoApp`.

Every action is checked at once with `backend.commands.check`, the same check
the CLI runs and the engine repeats: a refusal opens a `RefusedModal` that says
why (and takes the keyboard, so a reason typed next fires nothing). Actions that
change a live run ask first (`ConfirmModal`). Commands carry their intent: the
auto-promote toggle sends the value opposite to the one the operator last asked
for (a pending command counts, so pressing `p` twice leaves it as it was), and
an approval names the version the candidate was built on; a candidate built on
an older version is approved only as a confirmed rebase.
"""

from __future__ import annotations

from backend.commands import CommandRefused, check, stale_base
from backend.store.reader import loads
from evotui.components.confirm_modal import ConfirmModal, RefusedModal
from evotui.components.run_state import RunState
from evotui.engine_process import EngineHealth


class OperatorMixin:
    """Needs `state: RunState`, `health: EngineHealth`, `send_command(verb, arg)` and `push_screen`
    (the app)."""

    state: RunState
    health: EngineHealth

    def _init_operator(self) -> None:
        # sent, not yet seen as a row (CommandSent pops it): setting -> (verb, arg)
        self._in_flight: dict[str, tuple[str, dict]] = {}

    # ------------------------------------------------------------ what the operator asked for
    def _asked(self, verbs: tuple[str, ...]) -> tuple[str, dict] | None:
        """(verb, arg) of the newest command of `verbs` the engine has not applied yet: the one in
        flight, else the newest pending row; None when there is none."""
        if _setting(verbs[0]) in self._in_flight:
            return self._in_flight[_setting(verbs[0])]
        pending = [c for c in self.state.commands.values() if c["verb"] in verbs and c["status"] == "pending"]
        if not pending:
            return None
        newest = max(pending, key=lambda c: c["id"])
        return newest["verb"], loads(newest.get("arg_json"), {}) or {}

    def intended_auto_promote(self) -> bool:
        """The auto-promote value the operator last asked for (pending counts), else the run's."""
        asked = self._asked(("auto_promote",))
        return bool(asked[1].get("on")) if asked else bool(self.state.run.get("auto_promote"))

    def asked_auto_promote(self) -> bool | None:
        """The auto-promote value a command not yet applied will set, when it differs from the
        run's; None when nothing would change."""
        asked = self._asked(("auto_promote",))
        if asked is None or bool(asked[1].get("on")) == bool(self.state.run.get("auto_promote")):
            return None
        return bool(asked[1].get("on"))

    def intended_paused(self) -> bool:
        asked = self._asked(("pause", "resume"))
        if asked:
            return asked[0] == "pause"
        return self.state.run.get("status") == "paused" or bool(self.state.run.get("paused"))

    def asked_control(self) -> str | None:
        """"stopping…", "pausing…" or "resuming…" while such a command waits for the engine."""
        if "stop" in self._in_flight or self.state.pending_for("stop"):
            return "stopping…"
        asked = self._asked(("pause", "resume"))
        return None if asked is None else ("pausing…" if asked[0] == "pause" else "resuming…")

    # ------------------------------------------------------------ sending
    def _send_checked(self, verb: str, arg: dict, row: dict | None = None) -> bool:
        try:
            arg = check(verb, arg, self.state.run, row)
        except CommandRefused as e:
            self.refuse(str(e))
            return False
        self._in_flight[_setting(verb)] = (verb, arg)
        self.send_command(verb, arg)
        return True

    def command_written(self, verb: str) -> None:
        self._in_flight.pop(_setting(verb), None)

    def refuse(self, why: str, title: str = "Not done") -> None:
        self.push_screen(RefusedModal(title, why))

    def _confirm(self, title: str, message: str, label: str, then) -> None:
        self.push_screen(ConfirmModal(title, message, label), lambda ok: then() if ok else None)

    def _intervention(self, iid: int | None) -> dict | None:
        return next((r for r in self.state.interventions if r["id"] == iid), None)

    # ------------------------------------------------------------ the actions
    def request_approve(self, iid: int | None, inconclusive: bool = False) -> None:
        row = self._intervention(iid)
        if row is None:
            self.refuse("Select an intervention first (screen 4).")
            return
        arg = {"id": row["id"], "inconclusive": inconclusive}
        active = self.state.run.get("harness_version")
        drop = stale_base(row, active) and dropped_changes(self.state.versions, row.get("parent_version"), active)
        title = f"Approve #{row['id']}: {row.get('title') or ''}"
        try:
            check("approve", dict(arg, rebase=bool(drop)), self.state.run, row)
        except CommandRefused as e:
            self.refuse(str(e))
            return
        if drop:
            self._confirm(title, f"It is {drop}.\nRebase it: re-apply its change onto v{active}, backtest it "
                          "again, and promote it only if it still passes.", "Rebase and approve",
                          lambda: self._send_checked("approve", dict(arg, rebase=True), row))
            return
        self._confirm(title, f"Promote it as the new harness of the live run (it is {row['status']}, built on "
                      f"v{row.get('parent_version')}).", "Approve",
                      lambda: self._send_checked("approve", arg, row))

    def request_veto(self, iid: int | None) -> None:
        from evotui.components.veto_modal import VetoModal

        row = self._intervention(iid)
        if row is None:
            self.refuse("Select an intervention first (screen 4).")
            return
        try:
            check("veto", {"id": row["id"], "reason": "(asked next)"}, self.state.run, row)
        except CommandRefused as e:
            self.refuse(str(e))
            return
        self.push_screen(VetoModal(row["id"], row.get("title") or ""),
                         lambda reason: self._send_checked("veto", {"id": row["id"], "reason": reason}, row)
                         if reason else None)

    def request_auto_promote(self) -> None:
        on = not self.intended_auto_promote()
        message = ("Passed candidates will be promoted without asking you (the best waiting one at once)."
                   if on else "Passed candidates will wait for your approval.")
        self._confirm(f"Turn auto-promote {'on' if on else 'off'}?", message,
                      f"Auto-promote {'on' if on else 'off'}", lambda: self._send_checked("auto_promote", {"on": on}))

    def _engine_gone(self) -> bool:
        """A pause or stop needs a live engine: refused (and said) where it died."""
        if self.health.dead:
            self.refuse("The engine is not running (it crashed or was killed): nothing would take the command. "
                        "R starts it again from the last finished step.")
        return self.health.dead

    def request_pause(self) -> None:
        if self._engine_gone():
            return
        verb = "resume" if self.intended_paused() else "pause"
        message = ("Training goes on from where it paused." if verb == "resume" else
                   "The engine pauses at its next checkpoint (between generation batches, held-out batches "
                   "or candidates) and waits; commands are still applied while it waits.")
        self._confirm(f"{verb.capitalize()} the run?", message, verb.capitalize(),
                      lambda: self._send_checked(verb, {}))

    def request_stop(self) -> None:
        if self._engine_gone():
            return
        self._confirm("Stop the run?", "The engine stops at its next checkpoint with its state saved; "
                      "R (or evotui run --headless --resume RUN_DIR) goes on from the last finished step.",
                      "Stop", lambda: self._send_checked("stop", {}))


def dropped_changes(versions: list[dict], base: int | None, active: int | None) -> str:
    """What approving a candidate built on `base` drops while `active` is the harness: the
    versions on the active lineage after `base`, counted and named.

    >>> chain = [{"id": i, "parent": i - 1 or None} for i in range(1, 6)]
    >>> dropped_changes(chain, 1, 5)
    'built on v1; v5 is active: approving drops 4 changes: v2..v5'
    >>> dropped_changes(chain, 4, 5)
    'built on v4; v5 is active: approving drops 1 change: v5'
    """
    parent = {v["id"]: v.get("parent") for v in versions}
    lineage, node, seen = [], active, set()
    while node is not None and node != base and node not in seen:
        seen.add(node)
        lineage.append(node)
        node = parent.get(node)
    dropped = sorted(lineage) or [active]  # base off the line: the whole line back to its root
    n = len(dropped)
    contiguous = dropped == list(range(dropped[0], dropped[-1] + 1))
    names = f"v{dropped[0]}..v{dropped[-1]}" if n > 2 and contiguous else ", ".join(f"v{v}" for v in dropped)
    where = "" if node == base else f" (v{base} is not on its line)"
    return (f"built on v{base}; v{active} is active{where}: approving drops {n} change{'s' if n != 1 else ''}: "
            f"{names}")


def _setting(verb: str) -> str:
    """The setting a verb changes: pause and resume change one."""
    return "paused" if verb in ("pause", "resume") else verb
