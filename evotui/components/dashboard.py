"""Dashboard: the run at a glance. Numbers and sparklines always; plots where they fit.

Below 100 columns the numbers come first and the plots follow them in a scrolling
column (focused, so arrows, PgUp/PgDn and the mouse reach every chart); from 100
columns they sit side by side.
"""

from __future__ import annotations

from textual.containers import Grid, VerticalScroll

from evotui.components.metric_plot import PLOTS, MetricPlot
from evotui.components.metrics_panel import MetricsPanel
from evotui.components.run_screen import RunScreen


class DashboardScreen(RunScreen):
    """Held-out accuracy, reward and agreement, dead groups, failure mix, timings, memory."""

    TOPICS = frozenset({"run", "steps", "evals", "mix", "engine", "rounds"})
    AUTO_FOCUS = "#dash"
    BINDINGS = []

    def compose_body(self):
        with VerticalScroll(id="dash"):
            yield MetricsPanel()
            with Grid(id="plots"):
                for key, title, draw, empty in PLOTS:
                    yield MetricPlot(title, draw, empty, id=f"plot-{key}")

    def update_body(self, changed: set[str]) -> None:
        self.query_one(MetricsPanel).show(self.app.state, self.app.health)
        if changed & {"steps", "evals", "mix", "run"}:
            for plot in self.query(MetricPlot):
                plot.show(self.app.state)
