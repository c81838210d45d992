"""The one base of errors a user can cause and fix, and how the CLI shows them.

A bad config, a path that is not a run, a model that will not load, a skill
file that does not parse: each raises a subclass of `EvoError` whose message
is one line saying what is wrong and what to do. The CLI prints
`evotui: error: <message>` and exits 2; it never shows a traceback for these.
Anything else is a bug and is reported as a crash.

The subclasses live next to the code that raises them (`ConfigError` in
backend/config.py, `StoreError` in backend/store, ...); this module holds the
base and the errors of no particular layer. It imports nothing, so every layer
may import it.

    >>> try:
    ...     raise UsageError("not an evotui run directory: /tmp/x (no run.db)")
    ... except EvoError as e:
    ...     print(e.cli_line(), e.exit_code)
    evotui: error: not an evotui run directory: /tmp/x (no run.db) 2
"""

from __future__ import annotations


class EvoError(Exception):
    """A user-facing error: its message is one line, shown without a traceback."""

    exit_code = 2
    kind = "error"

    def cli_line(self) -> str:
        return f"evotui: {self.kind}: {self}"


class UsageError(EvoError):
    """A command given wrongly: a path that is not a run, a malformed argument."""


class RunStopped(EvoError):
    """The run stopped cleanly for lack of a resource (GPU memory, disk); the message says
    how to go on. Not a failure of the command: exit 3."""

    exit_code = 3
    kind = "stopped"
