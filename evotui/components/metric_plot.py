"""A plotext chart of the run (textual-plotext), redrawn from `RunState` by a draw function.

Each chart has a border: its title on top, its legend in the bottom border, so no
legend ever covers a line. A chart with nothing to draw says what will fill it and when.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rich.text import Text
from textual.content import Content
from textual_plotext import PlotextPlot

from evotui.components.run_state import RunState

MAX_POINTS = 400  # a terminal plot shows a few hundred columns of braille at most
COLORS = [(0, 175, 255), (255, 165, 0), (120, 200, 80), (215, 95, 215), (255, 95, 95)]
"""Series colours in order, as RGB so the plot and its legend are drawn in the same colour."""


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


@dataclass
class Drawn:
    """What a draw function drew: the x values (steps) and the legend, one (label, colour) per series."""

    xs: list = field(default_factory=list)
    legend: list[tuple[str, tuple[int, int, int]]] = field(default_factory=list)


class MetricPlot(PlotextPlot):
    """One chart; `draw(plt, state)` fills it after the figure is cleared and returns `Drawn`;
    `empty(state)` says what will fill it while there is nothing to draw."""

    DEFAULT_CSS = """
    MetricPlot { border: round $panel-lighten-2; border-title-color: $text; border-subtitle-align: right; }
    """

    def __init__(self, title: str, draw: Callable, empty: Callable[[RunState], str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = title
        self._draw = draw
        self._empty = empty
        self._message = ""
        self._drawn = 0  # bumped by show(): the built figure is reused until the data or the size changes
        self._built: tuple | None = None  # (drawn, size, renderable)

    def show(self, state: RunState) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        drawn = self._draw(plt, state)
        self._message = "" if drawn.xs else self._empty(state)
        if drawn.xs:
            plt.xticks(int_ticks(drawn.xs))  # whole steps; also keeps plotext's tick choice deterministic
        self.border_subtitle = legend(drawn.legend)
        self._drawn += 1
        self.refresh()

    def render(self):
        if not self._drawn:  # not shown yet: nothing to build (the first poll fills it)
            return Text("")
        if self._message:
            return Text(self._message, style="dim", justify="center")
        # plotext builds the whole figure on every render (a layout pass renders each chart
        # several times): build once per data and size
        key = (self._drawn, self.size, self.app.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, super().render())
        return self._built[1]


def legend(items: list[tuple[str, tuple[int, int, int]]]) -> Content:
    """`━ validation  ━ test`, each mark in its series' colour (empty for a single series)."""
    if len(items) < 2:
        return Content("")
    return Content("  ").join(Content.assemble(Content.styled("━ ", f"rgb{color}"), label)
                              for label, color in items)


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


def lines(plt, series: list[tuple[str, list, list]], unit: bool = False) -> Drawn:
    """Plot (label, xs, ys) series in the palette's colours; `unit` pins the y axis to 0..1."""
    drawn = Drawn()
    for (label, xs, ys), color in zip(series, COLORS):
        if not xs:
            continue
        xs, ys = thin(xs, ys)
        plt.plot(xs, ys, marker="braille", color=color)
        drawn.xs += xs
        drawn.legend.append((label, color))
    if drawn.xs:
        drawn.xs = sorted(set(drawn.xs))
        if unit:
            plt.ylim(0, 1)
    return drawn


def draw_heldout(plt, state: RunState) -> Drawn:
    """Validation (the gate reads it) and test (reported only)."""
    return lines(plt, [(split, *state.held_out(split)) for split in ("validation", "test")], unit=True)


def draw_reward(plt, state: RunState) -> Drawn:
    return lines(plt, [(label, *state.series(column)) for column, label in
                       (("reward_mean", "reward"), ("agreement", "agreement"), ("verdict_acc", "eval acc"))])


def draw_dead(plt, state: RunState) -> Drawn:
    return lines(plt, [("dead groups", *state.series("dead_group_frac"))], unit=True)


def draw_mix(plt, state: RunState) -> Drawn:
    steps, shares = state.mix_shares(top=4)
    return lines(plt, [(label, steps, ys) for label, ys in shares.items()], unit=True)


def draw_phases(plt, state: RunState) -> Drawn:
    rows = state.steps[-BAR_STEPS:]
    xs = [r["step"] for r in rows]
    colors = COLORS[:len(PHASE_LABELS)]
    if rows:
        plt.stacked_bar(xs, [[(r.get(p) or 0) / 1000 for r in rows] for p in PHASE_LABELS], color=colors, width=0.6)
    return Drawn(xs, list(zip(PHASE_LABELS.values(), colors)) if rows else [])


def draw_tokens(plt, state: RunState) -> Drawn:
    return lines(plt, [("tokens/s", *state.series("tokens_per_s"))])


def after_first_step(state: RunState) -> str:
    return "no steps yet: filled after the first training step"


def first_eval(state: RunState) -> str:
    return f"no held-out evaluation yet: {state.next_eval_text()}"


def first_labels(state: RunState) -> str:
    if state.steps:
        return "no failure labels so far: every rollout passed the diagnostics"
    return "no diagnoses yet: rollouts are labelled from the first training step"


PLOTS = [  # (key, title, draw, what fills an empty chart)
    ("heldout", "held-out accuracy", draw_heldout, first_eval),
    ("reward", "reward · agreement · eval acc", draw_reward, after_first_step),
    ("dead", "dead-group fraction", draw_dead, after_first_step),
    ("mix", "failure mix (share of labels)", draw_mix, first_labels),
    ("phases", "phase time per step (s)", draw_phases, after_first_step),
    ("tokens", "tokens/s", draw_tokens, after_first_step),
]
