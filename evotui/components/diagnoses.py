"""Diagnoses: each evolution round's failure table with trends; a label's rollouts on demand."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import DataTable

from backend.store.reader import loads
from backend.store.reader import label_rollouts, rollouts_by_ids
from evotui.components import cells
from evotui.components.run_screen import RunScreen
from evotui.messages import LabelChosen, LabelRolloutsFetched


def trend_cell(trend) -> Text:
    """A failure share's change since the previous round: rising is bad (red)."""
    if isinstance(trend, (int, float)):
        if abs(trend) < 1e-9:
            return Text("·  0.00", justify="right")
        return Text(f"{'▲' if trend > 0 else '▼'} {trend:+.2f}", style="red" if trend > 0 else "green",
                    justify="right")
    if isinstance(trend, list):
        return Text("".join("▁▂▃▄▅▆▇█"[min(7, max(0, int(float(v) * 7)))] for v in trend[-8:]))
    return cells.plain(trend)


class DiagnosesScreen(RunScreen):
    """Rounds on top; the selected round's failure table; the selected label's rollouts."""

    TOPICS = frozenset({"rounds"})
    AUTO_FOCUS = "#g-rounds"
    BINDINGS = [
        Binding("o", "open_label", "Open in Rollouts", tooltip="Rollouts filtered by the selected label"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.round: dict | None = None
        self.label: str | None = None

    def compose_body(self):
        yield DataTable(id="g-rounds", cursor_type="row", zebra_stripes=True)
        with Container(classes="split", id="g-split"):
            yield DataTable(id="g-table", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="g-rollouts", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        rounds = self.query_one("#g-rounds", DataTable)
        rounds.border_title = "evolution rounds"
        for name, width in (("round", 5), ("step", 5), ("H", 3), ("labels", 6), ("summary", 60)):
            rounds.add_column(name, width=width, key=name)
        table = self.query_one("#g-table", DataTable)
        table.border_title = "failure table"
        for name, width in (("label", 27), ("count", 5), ("share", 5), ("trend", 7), ("examples", 12)):
            table.add_column(name, width=width, key=name)
        rollouts = self.query_one("#g-rollouts", DataTable)
        rollouts.border_title = "rollouts with the label"
        for name, width in (("id", 6), ("step", 4), ("reward", 6), ("evidence", 40)):
            rollouts.add_column(name, width=width, key=name)

    def update_body(self, changed: set[str]) -> None:
        table = self.query_one("#g-rounds", DataTable)
        for r in reversed(self.app.state.rounds):
            if str(r["id"]) not in table.rows:
                n = len(loads(r.get("failure_table_json"), []) or [])
                table.add_row(r["id"], r["step"], r.get("harness_version"), n, cells.plain(r.get("summary")),
                              key=str(r["id"]))
        if self.round is None and self.app.state.rounds:
            self._show_round(self.app.state.rounds[-1])
        table.border_title = "evolution rounds" if self.app.state.rounds else \
            self.app.state.waiting_for_round("evolution round").rstrip(".")

    @on(DataTable.RowHighlighted, "#g-rounds")
    def _round_highlighted(self, message: DataTable.RowHighlighted) -> None:
        rid = int(message.row_key.value)
        self._show_round(next(r for r in self.app.state.rounds if r["id"] == rid))

    def _show_round(self, rnd: dict) -> None:
        self.round = rnd
        table = self.query_one("#g-table", DataTable)
        table.clear()
        for row in loads(rnd.get("failure_table_json"), []) or []:
            examples = " ".join(str(e) for e in (row.get("examples") or [])[:4])
            label = cells.plain(row.get("label"))
            if row.get("validity"):
                label.append(" ⚠", style="bold red")  # a validity label: a reward hack, blocks promotion
            table.add_row(label, row.get("count"), cells.number(row.get("share"), ".0%"),
                          trend_cell(row.get("trend")), cells.plain(examples), key=str(row.get("label")))
        table.border_title = f"failure table · round {rnd['id']} (step {rnd['step']})"
        if table.row_count:
            self._show_label(str(table.coordinate_to_cell_key((0, 0)).row_key.value))

    @on(DataTable.RowHighlighted, "#g-table")
    def _label_highlighted(self, message: DataTable.RowHighlighted) -> None:
        self._show_label(str(message.row_key.value))

    def _show_label(self, label: str) -> None:
        if self.round is None:
            return
        self.label = label
        earlier = [r["step"] for r in self.app.state.rounds if r["step"] < self.round["step"]]
        row = next((r for r in loads(self.round.get("failure_table_json"), []) or [] if r.get("label") == label), {})
        self._fetch_label(label, max(earlier, default=0) + 1, self.round["step"], row.get("examples") or [])

    @work(thread=True, exclusive=True, group="label-rollouts", exit_on_error=False)
    def _fetch_label(self, label: str, lo: int, hi: int, examples: list[int]) -> None:
        reader = self.app.reader("misc")
        rows = reader.call(label_rollouts, label, lo, hi)
        if not rows and examples:  # a group-level label (dead_groups) has examples but no per-rollout rows
            rows = reader.call(rollouts_by_ids, examples)
        self.post_message(LabelRolloutsFetched(label, rows))

    def on_label_rollouts_fetched(self, message: LabelRolloutsFetched) -> None:
        if message.label != self.label:
            return
        table = self.query_one("#g-rollouts", DataTable)
        table.clear()
        for r in message.rows:
            evidence = r.get("evidence") or r.get("labels")
            table.add_row(r["id"], r["step"], cells.number(r["reward"]), cells.plain(evidence, 80),
                          key=str(r["id"]))
        table.border_title = f"{message.label} · {len(message.rows)} rollouts (o: all in Rollouts)"

    @on(DataTable.RowSelected, "#g-table")
    def _label_selected(self) -> None:
        self.action_open_label()

    def action_open_label(self) -> None:
        if self.label:
            self.app.post_message(LabelChosen(self.label))
