"""Dashboard: the run at a glance. Numbers and sparklines always; plots where they fit."""

from __future__ import annotations

from textual.containers import Container, Grid

from evotui.components.metric_plot import PLOTS, MetricPlot
from evotui.components.metrics_panel import MetricsPanel
from evotui.components.run_screen import RunScreen


class DashboardScreen(RunScreen):
    """Held-out accuracy, reward and agreement, dead groups, failure mix, timings, memory."""

    TOPICS = frozenset({"run", "steps", "evals", "mix", "engine"})
    BINDINGS = []

    def compose_body(self):
        with Container(id="dash"):
            yield MetricsPanel()
            with Grid(id="plots"):
                for key, title, draw in PLOTS:
                    yield MetricPlot(title, draw, id=f"plot-{key}")

    def update_body(self, changed: set[str]) -> None:
        self.query_one(MetricsPanel).show(self.app.state, self.app.health)
        if changed & {"steps", "evals", "mix"}:
            for plot in self.query(MetricPlot):
                plot.show(self.app.state)
