"""What a headless run tells its terminal: a status line, one line per step, outcome lines.

The engine reports through one `StepProgress`; nothing else in the loop prints
(but warnings and errors, `Engine.say`):

- `phase(name, detail)`: the step's phase (generate, filter, train, checkpoint,
  store), also published as the run's activity (the TUI's header shows it);
- `activity(text)`: whatever the engine is doing between steps (held-out
  evaluation, an evolution round's candidates), fed by `Control.report`;
- `done(row)`: one line per finished step;
- `outcome(lines)`: what an evaluation or a round decided (backend/outcomes.py).

On a terminal the status line is redrawn in place with the time left; on a pipe
it becomes a plain line: a new kind of work (an evaluation, a round's backtests)
at once, a step's phases and the counters inside one kind of work at most once
per `every_s` seconds, so a log stays readable. Step and outcome lines go to stdout, status lines to stderr.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Callable, TextIO

PHASES = ("generate", "filter", "train", "checkpoint", "store")
"""`Engine.train_step`'s phases, in order (benchmarks time them: backend/tools/bench_ddp.py)."""

SHOWN = {"filter": "score", "checkpoint": "train", "store": "store"}
"""What the status line calls a phase: filtering and the advantages are the harness scoring the
batch; a checkpoint is the end of training."""

PIPE_EVERY_S = 30.0
"""At most one status line per this many seconds when stderr is not a terminal."""


def eta_text(seconds: float) -> str:
    """`~42s`, `~3m10s`, `~1h05m`.

    >>> eta_text(42.3), eta_text(190), eta_text(3900)
    ('~42s', '~3m10s', '~1h05m')
    """
    s = int(round(seconds))
    if s < 60:
        return f"~{s}s"
    if s < 3600:
        return f"~{s // 60}m{s % 60:02d}s"
    return f"~{s // 3600}h{s % 3600 // 60:02d}m"


class StepProgress:
    """The terminal's view of one run. `report`: where the phase is published as the run's
    activity (`Control.report`); `out` / `err`: the streams (stdout, stderr); `tty`: whether
    `err` is a terminal (default: ask it); `clock`: seconds, for the time left and the pipe rate."""

    def __init__(self, total_steps: int, quiet: bool = False, report: Callable[[str | None], None] | None = None,
                 out: TextIO | None = None, err: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, every_s: float = PIPE_EVERY_S):
        self.total = total_steps
        self.quiet = quiet
        self.report = report
        self.out, self.err = out, err
        self.tty = tty
        self.clock, self.every_s = clock, every_s
        self.step = 0
        self._began: tuple[int, float] | None = None  # (first step of this process, when it began)
        self._done: tuple[int, float] | None = None  # (the last step finished, when)
        self._shown: str | None = None  # the status text last drawn
        self._drawn = False  # a status line is on the terminal now (to be cleared before a line)
        self._last_plain: tuple[float, str] | None = None  # (when, the text's kind) of the last plain line

    # ------------------------------------------------------------ what the engine calls
    def start(self, step: int) -> StepProgress:
        self.step = step
        if self._began is None:
            self._began = (step, self.clock())
        return self

    def phase(self, name: str, detail: str = "") -> None:
        """The step entered phase `name` (PHASES); `detail`: progress inside it (`batch 3`)."""
        text = f"step {self.step}/{self.total}: {SHOWN.get(name, name)}" + (f" ({detail})" if detail else "")
        if self.report is not None:
            self.report(text)
        self.activity(text)

    def activity(self, text: str | None) -> None:
        """Show what the engine does now (a held-out evaluation, a round's backtests)."""
        if self.quiet or not text or text == self._shown:
            return
        self._shown = text
        line = text + self._left()
        if self._is_tty():
            self._err().write("\r\x1b[K" + line[:_width() - 1])
            self._err().flush()
            self._drawn = True
            return
        now, key = self.clock(), re.sub(r"\d+", "#", text)
        since = None if self._last_plain is None else now - self._last_plain[0]
        # a new kind of work (an evaluation, a round's backtests) shows at once; a step's routine
        # phases and the counters inside one kind of work, at most once per every_s
        new_kind = not text.startswith("step ") and (self._last_plain is None or key != self._last_plain[1])
        if new_kind or since is None or since >= self.every_s:
            self._last_plain = (now, key)
            print(line, file=self._err(), flush=True)

    def done(self, row: dict) -> None:
        self.line(f"step {row['step']:>4}/{self.total}  reward {row['reward_mean']:.3f}  "
                  f"acc {row['verdict_acc']:.3f}  agree {row['agreement']:.2f}  "
                  f"dead {row['dead_group_frac']:.2f}  loss {row['loss']:+.4f}  "
                  f"{row['total_ms'] / 1000:.1f}s" + self._left(after=row["step"]))

    def outcome(self, lines: list[str]) -> None:
        """What an evaluation or a round decided, a line each, as it happens."""
        for text in lines:
            self.line(text)

    def line(self, text: str) -> None:
        """A permanent line on stdout (the status line, if drawn, is cleared first)."""
        if self.quiet:
            return
        if self._drawn:
            self._err().write("\r\x1b[K")
            self._err().flush()
            self._drawn = False
            self._shown = None
        print(text, file=self._out(), flush=True)

    # ------------------------------------------------------------ helpers
    def _left(self, after: int | None = None) -> str:
        """`, ~3m10s left`: the steps left at this process's mean wall time per finished step
        (evaluations and rounds included), less the time the current step has run; empty before
        the first step is done. `after`: the step just finished."""
        if after is not None:
            self._done = (after, self.clock())
        if self._began is None or self._done is None:
            return ""
        (first, t0), (last, t_last) = self._began, self._done
        per = (t_last - t0) / (last - first + 1)
        left = self.total - last
        if left <= 0:
            return ""
        # the step under way counts at most as one done (the time since the last step may be a round's)
        return f", {eta_text(max(per * max(left - 1, 0), per * left - (self.clock() - t_last)))} left"

    def _out(self) -> TextIO:
        return self.out if self.out is not None else sys.stdout

    def _err(self) -> TextIO:
        return self.err if self.err is not None else sys.stderr

    def _is_tty(self) -> bool:
        if self.tty is None:
            isatty = getattr(self._err(), "isatty", None)
            self.tty = bool(isatty and isatty())
        return self.tty


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns
