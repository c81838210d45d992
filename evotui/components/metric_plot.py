"""A plotext chart of the run (textual-plotext), redrawn from `RunState` by a draw function."""

from __future__ import annotations

from typing import Callable

from textual_plotext import PlotextPlot

from evotui.components.run_state import RunState

PHASE_LABELS = {"gen_ms": "gen", "score_ms": "score", "diagnose_ms": "diag", "train_ms": "train",
                "store_ms": "store"}
BAR_STEPS = 24


class MetricPlot(PlotextPlot):
    """One chart; `draw(plt, state)` fills it after the figure is cleared."""

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
        self._draw(plt, state)
        self.refresh()


def draw_heldout(plt, state: RunState) -> None:
    evals = [e for e in state.evals if e.get("accuracy") is not None]
    if evals:
        plt.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], marker="braille")
        plt.ylim(0, 1)


def draw_reward(plt, state: RunState) -> None:
    for column, label in (("reward_mean", "reward"), ("agreement", "agreement"), ("verdict_acc", "eval acc")):
        xs, ys = state.series(column)
        if xs:
            plt.plot(xs, ys, label=label, marker="braille")


def draw_dead(plt, state: RunState) -> None:
    xs, ys = state.series("dead_group_frac")
    if xs:
        plt.plot(xs, ys, marker="braille")
        plt.ylim(0, 1)


def draw_mix(plt, state: RunState) -> None:
    steps, shares = state.mix_shares(top=4)
    for label, ys in shares.items():
        plt.plot(steps, ys, label=label[:14], marker="braille")
    if steps:
        plt.ylim(0, 1)


def draw_phases(plt, state: RunState) -> None:
    rows = state.steps[-BAR_STEPS:]
    if not rows:
        return
    xs = [r["step"] for r in rows]
    plt.stacked_bar(xs, [[(r.get(p) or 0) / 1000 for r in rows] for p in PHASE_LABELS],
                    labels=list(PHASE_LABELS.values()))
    plt.ylabel("s")


def draw_tokens(plt, state: RunState) -> None:
    xs, ys = state.series("tokens_per_s")
    if xs:
        plt.plot(xs, ys, marker="braille")


PLOTS = [
    ("heldout", "held-out accuracy", draw_heldout),
    ("reward", "reward · agreement · eval acc", draw_reward),
    ("dead", "dead-group fraction", draw_dead),
    ("mix", "failure mix (share)", draw_mix),
    ("phases", "phase time per step (s)", draw_phases),
    ("tokens", "tokens/s", draw_tokens),
]
