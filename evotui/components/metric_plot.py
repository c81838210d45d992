"""A plotext chart of the run (textual-plotext), redrawn from `RunState` by a draw function."""

from __future__ import annotations

from typing import Callable

from textual_plotext import PlotextPlot

from evotui.components.run_state import RunState

MAX_POINTS = 400  # a terminal plot shows a few hundred columns of braille at most


def thin(xs: list, ys: list, n: int = MAX_POINTS) -> tuple[list, list]:
    """Every k-th point (and the last), so a 100 000-step run plots as fast as a short one."""
    if len(xs) <= n:
        return xs, ys
    k = -(-len(xs) // n)
    idx = list(range(0, len(xs) - 1, k)) + [len(xs) - 1]
    return [xs[i] for i in idx], [ys[i] for i in idx]


PHASE_LABELS = {"gen_ms": "gen", "score_ms": "score", "diagnose_ms": "diag", "train_ms": "train",
                "store_ms": "store"}
BAR_STEPS = 24


class MetricPlot(PlotextPlot):
    """One chart; `draw(plt, state)` fills it after the figure is cleared and returns its x values."""

    def __init__(self, title: str, draw: Callable, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self._draw = draw

    def show(self, state: RunState) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        plt.xlabel("step")
        xs = self._draw(plt, state)
        if xs:
            plt.xticks(int_ticks(xs))  # whole steps; also keeps plotext's tick choice deterministic
        self.refresh()


def int_ticks(xs: list[int], n: int = 5) -> list[int]:
    """At most `n` round whole-number ticks within the range of `xs` (1, 2, 5, 10, 20, 50, ... apart).

    >>> int_ticks([0, 5, 10])
    [0, 5, 10]
    """
    lo, hi = min(xs), max(xs)
    step = 1
    while (hi - lo) // step > n - 1:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2  # 1, 2, 5, 10, 20, 50, ...
    first = -(-lo // step) * step
    return list(range(first, hi + 1, step)) or [lo]


def draw_heldout(plt, state: RunState) -> list[int]:
    """Validation (the gate reads it) and test (reported only), labelled."""
    steps: list[int] = []
    for split in ("validation", "test"):
        xs, ys = state.held_out(split)
        if xs:
            plt.plot(xs, ys, label=split, marker="braille")
            steps += xs
    if steps:
        plt.ylim(0, 1)
    return sorted(set(steps))


def draw_reward(plt, state: RunState) -> list[int]:
    for column, label in (("reward_mean", "reward"), ("agreement", "agreement"), ("verdict_acc", "eval acc")):
        xs, ys = thin(*state.series(column))
        if xs:
            plt.plot(xs, ys, label=label, marker="braille")
    return state.series("reward_mean")[0]


def draw_dead(plt, state: RunState) -> list[int]:
    xs, ys = thin(*state.series("dead_group_frac"))
    if xs:
        plt.plot(xs, ys, marker="braille")
        plt.ylim(0, 1)
    return xs


def draw_mix(plt, state: RunState) -> list[int]:
    steps, shares = state.mix_shares(top=4)
    for label, ys in shares.items():
        plt.plot(*thin(steps, ys), label=label[:14], marker="braille")
    if steps:
        plt.ylim(0, 1)
    return steps


def draw_phases(plt, state: RunState) -> list[int]:
    rows = state.steps[-BAR_STEPS:]
    xs = [r["step"] for r in rows]
    if rows:
        plt.stacked_bar(xs, [[(r.get(p) or 0) / 1000 for r in rows] for p in PHASE_LABELS],
                        labels=list(PHASE_LABELS.values()))
    return xs


def draw_tokens(plt, state: RunState) -> list[int]:
    xs, ys = thin(*state.series("tokens_per_s"))
    if xs:
        plt.plot(xs, ys, marker="braille")
    return xs


PLOTS = [
    ("heldout", "held-out accuracy", draw_heldout),
    ("reward", "reward · agreement · eval acc", draw_reward),
    ("dead", "dead-group fraction", draw_dead),
    ("mix", "failure mix (share)", draw_mix),
    ("phases", "phase time per step (s)", draw_phases),
    ("tokens", "tokens/s", draw_tokens),
]
