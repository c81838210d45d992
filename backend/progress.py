"""A progress bar per step for headless runs (tqdm), one line per finished step, and the
phase reported as the run's activity (`report`: the TUI's header shows it)."""

from __future__ import annotations

import sys

from tqdm import tqdm

PHASES = ("generate", "filter", "train", "checkpoint", "store")


class StepProgress:
    def __init__(self, total_steps: int, quiet: bool = False, report=None):
        self.total = total_steps
        self.quiet = quiet
        self.report = report
        self.step = 0
        self.bar = None

    def start(self, step: int) -> "StepProgress":
        self.step = step
        if not self.quiet and sys.stderr.isatty():
            self.bar = tqdm(total=len(PHASES), desc=f"step {step}/{self.total}", leave=False,
                            file=sys.stderr, bar_format="{desc} {bar:20} {postfix}", dynamic_ncols=True)
        return self

    def phase(self, name: str) -> None:
        if self.report is not None:
            self.report(f"step {self.step}/{self.total}: {name}")
        if self.bar is not None:
            if self.bar.n or name != PHASES[0]:
                self.bar.update(1)
            self.bar.set_postfix_str(name)

    def done(self, row: dict) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if not self.quiet:
            print(f"step {row['step']:>4}/{self.total}  reward {row['reward_mean']:.3f}  "
                  f"acc {row['verdict_acc']:.3f}  agree {row['agreement']:.2f}  "
                  f"dead {row['dead_group_frac']:.2f}  loss {row['loss']:+.4f}  "
                  f"{row['total_ms'] / 1000:.1f}s", flush=True)
