"""`evotui open POP`: the population screen, live, with the operator's approve and veto of moves.

    PopulationApp(pop_dir).run()

The app reads the population in a worker thread (`read_population`: its
database and each member's run database) and posts the snapshot; the screen
redraws from it. With `watch` on it reads again every `POLL_S` seconds; F5 reads
at once. In a supervised population a gated explore move waits as `pending`:
`a` approves and `v` vetoes the move under the lineage cursor, after a
confirmation dialog (components/confirm_modal.py), through the population's own
decisions (backend/population/decisions.py), which the coordinator applies at
the next segment boundary. A key that cannot act (an autonomous population, a
copy, a move no longer pending) says why in a notification and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import ModalScreen

from backend.errors import EvoError
from backend.store.base import StoreError
from backend.tools.population_view import PopulationView, read_population
from evotui.components.key_gate import KeyGateMixin
from evotui.components.population_screen import PopulationScreen

POLL_S = 2.0
"""Seconds between two reads of a population being trained (a segment takes minutes)."""


class PopulationRead(Message):
    """A new snapshot of the population was read."""

    def __init__(self, view: PopulationView) -> None:
        super().__init__()
        self.view = view


class DecisionMade(Message):
    """The operator's approve or veto was written (`line`), or refused (`error`)."""

    def __init__(self, line: str | None, error: str | None) -> None:
        super().__init__()
        self.line, self.error = line, error


class PopulationApp(KeyGateMixin, App[int]):
    """One population: members, validation curves, lineage; approve and veto of pending moves."""

    TITLE = "evotui population"
    BINDINGS = [Binding("q", "quit", "Quit")]

    def __init__(self, pop_dir: Path, *, watch: bool = True) -> None:
        super().__init__()
        self.pop_dir = Path(pop_dir)
        self.watch_files = watch
        self.view: PopulationView | None = None
        self._init_key_gate()

    def on_mount(self) -> None:
        self.push_screen(PopulationScreen())
        self.sub_title = str(self.pop_dir)
        self.request_read()
        if self.watch_files:
            self.set_interval(POLL_S, self.request_read)

    # ------------------------------------------------------------ data in
    def request_read(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, group="read", exit_on_error=False)
    def _read(self) -> None:
        try:
            self.post_message(PopulationRead(read_population(self.pop_dir)))
        except (StoreError, OSError) as e:  # a half-written member, a lock: shown, read again later
            self.call_from_thread(self.notify, str(e), title="Reading the population", severity="warning")

    def on_population_read(self, message: PopulationRead) -> None:
        self.view = message.view
        screen = self._population_screen()
        if screen is not None:
            screen.show(message.view)

    def _population_screen(self) -> PopulationScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, PopulationScreen)), None)

    # ------------------------------------------------------------ operator
    def action_refresh(self) -> None:
        self.request_read()

    def action_approve_move(self) -> None:
        self._decide("approve")

    def action_veto_move(self) -> None:
        self._decide("veto")

    def _decide(self, verb: str) -> None:
        """Ask to approve or veto the selected move; say why not where it cannot be."""
        from evotui.components.confirm_modal import ConfirmModal

        screen = self._population_screen()
        eid = screen.selected_event() if screen is not None else None
        why = refusal(self.view, eid, verb)
        if why:
            self.notify(why, title=verb.capitalize(), severity="warning")
            return
        assert self.view is not None and eid is not None
        e = next(x for x in self.view.events if x.id == eid)
        what = f"member m{e.member}: {e.knob} {e.old_value} → {e.new_value}"
        what += f"\n{e.diagnosis}" if e.diagnosis else ""
        title = f"{verb.capitalize()} move #{eid}?"
        self.push_screen(ConfirmModal(title, what, verb.capitalize()),
                         lambda ok: self._write(verb, eid) if ok else None)

    @work(thread=True, group="decide", exit_on_error=False)
    def _write(self, verb: str, eid: int) -> None:
        from backend.population import decisions

        try:
            line = (decisions.approve if verb == "approve" else decisions.veto)(self.pop_dir, eid)
            self.post_message(DecisionMade(line, None))
        except (EvoError, StoreError) as e:  # the move changed under us (applied, vetoed elsewhere)
            self.post_message(DecisionMade(None, e.cli_line() if isinstance(e, EvoError) else str(e)))

    def on_decision_made(self, message: DecisionMade) -> None:
        if message.error:
            self.notify(message.error, title="Refused", severity="error")
        else:
            self.notify(message.line or "", title="Population")
        self.request_read()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if isinstance(self.screen, ModalScreen) and action not in ("focus_next", "focus_previous"):
            return False  # a dialog has the keyboard
        return True


def refusal(view: PopulationView | None, eid: int | None, verb: str) -> str | None:
    """Why `verb` cannot act on event `eid` now, or None when it can ask."""
    if view is None:
        return "the population is still being read"
    if not view.supervised:
        return "this population is autonomous: its moves apply without an operator (start it with --supervised)"
    e = next((x for x in view.events if x.id == eid), None)
    if e is None:
        return "no copy or move selected: move the cursor to a pending move in the lineage table"
    if e.kind != "move":
        return f"#{e.id} is a copy; only explore moves wait for the operator"
    if e.status != "pending":
        return f"move #{e.id} is {e.status}; only a pending move can be {'approved' if verb == 'approve' else 'vetoed'}"
    return None
