"""Table cells: user text is never parsed as markup; statuses and verdicts get a colour."""

from __future__ import annotations

from rich.text import Text

GOOD = {"correct", "pass", "ok", "applied", "promoted", "approved", "finished", "info", "active"}
BAD = {"wrong", "failed", "fail", "error", "timeout", "rejected", "vetoed", "rolled_back", "crashed",
       "no_answer"}
WAIT = {"pending", "proposed", "backtesting", "warning", "candidate", "paused", "stopped", "inconclusive"}
PAST = {"superseded", "retired", "expired"}  # history, not a problem


def plain(value, width: int | None = None) -> Text:
    """A cell that shows `value` literally (brackets and all), cut to `width`."""
    text = "" if value is None else str(value).replace("\n", " ")
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return Text(text, no_wrap=True, overflow="ellipsis")


def status(value: str | None) -> Text:
    """A status or verdict, coloured by what it means."""
    value = value or ""
    if value == "passed":  # an intervention waiting for the operator: the one thing to act on
        return Text(value, style="bold yellow", no_wrap=True)
    style = ("green" if value in GOOD else "red" if value in BAD else "yellow" if value in WAIT
             else "dim" if value in PAST else "")
    return Text(value, style=style, no_wrap=True)


def verdict(value: str | None) -> Text:
    value = value or ""
    return Text(value, style="green" if value in GOOD else "red" if value in BAD else "", no_wrap=True)


def number(value, spec: str = ".3f") -> Text:
    if value is None:
        return Text("–", justify="right")
    return Text(format(value, spec), justify="right", no_wrap=True)
