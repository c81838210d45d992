"""What a run's screens need from the app that hosts them, as a protocol.

The screens read the run's state and the engine's health, open read-only
connections, ask for operator actions (which the app checks and confirms) and
hand their workers' failures to the app's one error handler. They never
import the app: `EvoApp` satisfies this protocol, and a test may pass any
other host that does.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from textual.worker import Worker

from backend.store.reader import RunReader
from evotui.components.run_state import RunState
from evotui.engine_process import EngineHealth


class RunHost(Protocol):
    """The app as a run's screens see it."""

    state: RunState
    health: EngineHealth
    run_dir: Path

    def reader(self, name: str = "poll") -> RunReader:
        """A read-only connection of the run database, one per purpose."""

    def asked_control(self) -> str | None:
        """"stopping…", "pausing…" or "resuming…" while such a command waits for the engine."""

    def asked_auto_promote(self) -> bool | None:
        """The auto-promote value a pending command will set, when it differs from the run's."""

    def intended_auto_promote(self) -> bool:
        """The auto-promote value the operator last asked for (pending counts), else the run's."""

    def request_approve(self, iid: int | None, inconclusive: bool = False) -> None: ...

    def request_veto(self, iid: int | None) -> None: ...

    def check_harness_edit(self) -> object:
        """Propose a hand edit of the harness file (a worker)."""

    def report_worker_error(self, event: Worker.StateChanged) -> None: ...

    def suspend(self) -> AbstractContextManager[None]: ...
