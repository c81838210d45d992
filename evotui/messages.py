"""App-wide messages, named as events that happened. Workers post them; handlers assign state.

High-rate messages (`DataChanged`) replace each other in the queue, so a run
writing thousands of rows a second produces one poll, not thousands.
"""

from __future__ import annotations

from textual.message import Message

from backend.store.reader import FilterChoices, RolloutFilter, RunDelta
from evotui.engine_process import EngineHealth


class DataChanged(Message):
    """Something in the run directory changed (watchfiles or the data_version tick)."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DataChanged)


class HarnessFileChanged(Message):
    """`harness.py` in the run directory was written (maybe by hand)."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, HarnessFileChanged)


class RunUpdated(Message):
    """A poll finished: new rows (or None when nothing was committed), engine health, log tail."""

    def __init__(self, delta: RunDelta | None, health: EngineHealth, log_lines: list[str] | None) -> None:
        super().__init__()
        self.delta = delta
        self.health = health
        self.log_lines = log_lines


class ScreensImported(Message):
    """Every screen's module is imported (the preload worker): screens can be built ahead."""


class RolloutsFetched(Message):
    """A page of rollouts for `flt`: `mode` is top (replace), older (append) or newer (prepend)."""

    def __init__(self, flt: RolloutFilter, mode: str, rows: list[dict]) -> None:
        super().__init__()
        self.flt = flt
        self.mode = mode
        self.rows = rows


class RolloutDetailFetched(Message):
    def __init__(self, detail: dict | None) -> None:
        super().__init__()
        self.detail = detail


class FilterChoicesFetched(Message):
    def __init__(self, choices: FilterChoices) -> None:
        super().__init__()
        self.choices = choices


class InterventionDetailFetched(Message):
    def __init__(self, detail: dict | None) -> None:
        super().__init__()
        self.detail = detail


class HarnessVersionFetched(Message):
    def __init__(self, version: dict | None, parent: dict | None) -> None:
        super().__init__()
        self.version = version
        self.parent = parent


class FrontierFetched(Message):
    """The population's frontier (`backend.evolve.frontier.Member.to_dict()` rows), active first."""

    def __init__(self, members: list[dict]) -> None:
        super().__init__()
        self.members = members


class SkillsFetched(Message):
    def __init__(self, text: str, rows: list[dict]) -> None:
        super().__init__()
        self.text = text
        self.rows = rows


class SkillFetched(Message):
    def __init__(self, card: dict | None) -> None:
        super().__init__()
        self.card = card


class LabelRolloutsFetched(Message):
    def __init__(self, label: str, rows: list[dict]) -> None:
        super().__init__()
        self.label = label
        self.rows = rows


class CommandSent(Message):
    """An operator command row was written (status pending)."""

    def __init__(self, cid: int, verb: str, arg: dict) -> None:
        super().__init__()
        self.cid = cid
        self.verb = verb
        self.arg = arg


class CommandAcknowledged(Message):
    """The engine applied or rejected a command (its row, status no longer pending)."""

    def __init__(self, command: dict) -> None:
        super().__init__()
        self.command = command


class LabelChosen(Message):
    """The operator picked a failure label: show its rollouts."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


class DialogChanged(Message):
    """A dialog has mounted and focused its first control, or closed: keys held meanwhile go on."""
