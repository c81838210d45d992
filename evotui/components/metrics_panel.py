"""Latest value and a sparkline for each headline metric: the dashboard at any size."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Label, Static

from evotui.components.run_state import RunState
from evotui.components.status_bar import fmt
from evotui.engine_process import EngineHealth

UNIT, FROM_ZERO, SPAN = "unit", "from_zero", "span"
"""How a sparkline is scaled: UNIT is 0..1 (accuracies, fractions), FROM_ZERO is 0..max
(rates and times), SPAN is min(0, lowest)..max(1, highest) (rewards, whose range a harness sets)."""
METRICS = [  # (key, label, steps column or None, format, scale)
    ("val", "validation acc", None, ".3f", UNIT),
    ("test", "test acc", None, ".3f", UNIT),
    ("reward", "reward mean", "reward_mean", ".3f", SPAN),
    ("agreement", "agreement", "agreement", ".3f", UNIT),
    ("verdict", "evaluator acc", "verdict_acc", ".3f", UNIT),
    ("dead", "dead groups", "dead_group_frac", ".3f", UNIT),
    ("tps", "tokens/s", "tokens_per_s", ".0f", FROM_ZERO),
    ("step_s", "step time s", "total_ms", ".1f", FROM_ZERO),
]
PHASES = ("gen_ms", "score_ms", "diagnose_ms", "train_ms", "store_ms")
SPLITS = {"val": "validation", "test": "test"}
BARS = "▁▂▃▄▅▆▇█"


def value_range(values: list[float], scale: str) -> tuple[float, float]:
    """The range a sparkline is drawn against: the metric's own, never just the data's, so one
    point or a flat series is drawn at its true height.

    >>> value_range([0.2, 0.4], UNIT), value_range([310, 382], FROM_ZERO), value_range([-0.5, 1.1], SPAN)
    ((0.0, 1.0), (0.0, 382), (-0.5, 1.1))
    """
    if scale == UNIT:
        return 0.0, 1.0
    hi = max(values, default=1.0)
    if scale == FROM_ZERO:
        return 0.0, hi if hi > 0 else 1.0
    return min(0.0, min(values, default=0.0)), max(1.0, hi)


def spark(values: list[float], lo: float, hi: float, width: int) -> str:
    """One bar per value (the newest `width` of them), its height the value's place in lo..hi.

    >>> spark([0.156], 0, 1, 10), spark([1.0], 0, 1, 10), spark([0, 0.5, 1], 0, 1, 10)
    ('▂', '█', '▁▅█')
    """
    if width <= 0:
        return ""
    span = (hi - lo) or 1.0
    return "".join(BARS[round(min(1.0, max(0.0, (v - lo) / span)) * (len(BARS) - 1))]
                   for v in values[-width:])


class Spark(Widget):
    """A sparkline that fills at most its width with one bar per step, scaled to the metric's range."""

    DEFAULT_CSS = "Spark { height: 1; color: $accent; }"

    def __init__(self, empty: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.values: list[float] = []
        self.bounds = (0.0, 1.0)
        self.empty = empty

    def show(self, values: list[float], bounds: tuple[float, float]) -> None:
        self.values, self.bounds = values, bounds
        self.refresh()

    def render(self) -> Content:
        if not self.values:
            return Content.styled(self.empty, "$text-muted")
        return Content(spark(self.values, *self.bounds, self.content_size.width))


class MetricsPanel(Vertical):
    """One row per metric: name, latest value, sparkline over recent steps."""

    DEFAULT_CSS = """
    MetricsPanel { height: auto; padding: 0 1; }
    MetricsPanel Horizontal { height: 1; }
    MetricsPanel .name { width: 15; color: $text-muted; }
    MetricsPanel .value { width: 9; text-align: right; margin-right: 1; }
    MetricsPanel Spark { width: 1fr; }
    MetricsPanel #phases, MetricsPanel #memory { height: auto; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        for key, label, _, _, _ in METRICS:
            with Horizontal():
                yield Label(label, classes="name")
                yield Static("–", id=f"v-{key}", classes="value")
                yield Spark(id=f"s-{key}")
        yield Static("", id="phases")
        yield Static("", id="memory")

    def show(self, state: RunState, health: EngineHealth) -> None:
        for key, _, column, spec, scale in METRICS:
            values = self._values(state, key, column)
            latest = values[-1] if values else state.run.get(f"{key}_acc") if key in SPLITS else None
            self.query_one(f"#v-{key}", Static).update(fmt(latest, spec))
            spark_widget = self.query_one(f"#s-{key}", Spark)
            spark_widget.empty = waiting_for(key, state)
            spark_widget.show(values, value_range(values, scale))
        self.query_one("#phases", Static).update(phase_line(state.steps[-1] if state.steps else {}))
        self.query_one("#memory", Static).update(f"memory  {health.memory or 'engine not running'}")

    @staticmethod
    def _values(state: RunState, key: str, column: str | None) -> list[float]:
        if key in SPLITS:
            return state.held_out(SPLITS[key])[1]
        values = state.series(column)[1]
        return [v / 1000 for v in values] if column == "total_ms" else values


def waiting_for(key: str, state: RunState) -> str:
    """What fills an empty row, and when."""
    if key in SPLITS:
        return state.next_eval_text()
    return "after the first training step" if not state.steps else "not measured"


def phase_line(step: dict) -> str:
    """Where the last step's time went, e.g. 'gen 4.7s · score 0.2s · ...'."""
    total = sum(step.get(p) or 0 for p in PHASES)
    if not total:
        return "phases  –"
    parts = [f"{p[:-3].replace('diagnose', 'diag')} {(step.get(p) or 0) / 1000:.1f}s" for p in PHASES]
    return "phases  " + " · ".join(parts)
