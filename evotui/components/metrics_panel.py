"""Latest value and a sparkline for each headline metric: the dashboard at any size."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline, Static

from evotui.components.run_state import RunState
from evotui.components.status_bar import fmt
from evotui.engine_process import EngineHealth

SPARK_POINTS = 60
METRICS = [  # (key, label, steps column or None, format)
    ("val", "validation acc", None, ".3f"),
    ("test", "test acc", None, ".3f"),
    ("reward", "reward mean", "reward_mean", ".3f"),
    ("agreement", "agreement", "agreement", ".3f"),
    ("verdict", "evaluator acc", "verdict_acc", ".3f"),
    ("dead", "dead groups", "dead_group_frac", ".3f"),
    ("tps", "tokens/s", "tokens_per_s", ".0f"),
    ("step_s", "step time s", "total_ms", ".1f"),
]
PHASES = ("gen_ms", "score_ms", "diagnose_ms", "train_ms", "store_ms")
SPLITS = {"val": "validation", "test": "test"}


class MetricsPanel(Vertical):
    """One row per metric: name, latest value, sparkline over recent steps."""

    DEFAULT_CSS = """
    MetricsPanel { height: auto; padding: 0 1; }
    MetricsPanel Horizontal { height: 1; }
    MetricsPanel .name { width: 15; color: $text-muted; }
    MetricsPanel .value { width: 9; text-align: right; margin-right: 1; }
    MetricsPanel Sparkline { width: 1fr; height: 1; }
    MetricsPanel #phases, MetricsPanel #memory { height: auto; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        for key, label, _, _ in METRICS:
            with Horizontal():
                yield Label(label, classes="name")
                yield Static("–", id=f"v-{key}", classes="value")
                yield Sparkline([], id=f"s-{key}")
        yield Static("", id="phases")
        yield Static("", id="memory")

    def show(self, state: RunState, health: EngineHealth) -> None:
        for key, _, column, spec in METRICS:
            values = self._values(state, key, column)
            latest = values[-1] if values else state.run.get(f"{key}_acc") if key in SPLITS else None
            self.query_one(f"#v-{key}", Static).update(fmt(latest, spec))
            self.query_one(f"#s-{key}", Sparkline).data = values[-SPARK_POINTS:]
        self.query_one("#phases", Static).update(phase_line(state.steps[-1] if state.steps else {}))
        self.query_one("#memory", Static).update(f"memory  {health.memory or 'engine not running'}")

    @staticmethod
    def _values(state: RunState, key: str, column: str | None) -> list[float]:
        if key in SPLITS:
            return state.held_out(SPLITS[key])[1]
        values = state.series(column)[1]
        return [v / 1000 for v in values] if column == "total_ms" else values


def phase_line(step: dict) -> str:
    """Where the last step's time went, e.g. 'gen 4.7s · score 0.2s · ...'."""
    total = sum(step.get(p) or 0 for p in PHASES)
    if not total:
        return "phases  –"
    parts = [f"{p[:-3].replace('diagnose', 'diag')} {(step.get(p) or 0) / 1000:.1f}s" for p in PHASES]
    return "phases  " + " · ".join(parts)
