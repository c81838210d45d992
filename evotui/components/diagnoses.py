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
from evotui.components.fitted_table import Col, FittedTable
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


ROUND_COLUMNS = [Col("round", "round", 5), Col("step", "step", 4), Col("H", "H", 2, priority=2),
                 Col("labels", "labels", 6, priority=1), Col("summary", "summary", 20, grow=1)]
FAILURE_COLUMNS = [Col("label", "label", 16, grow=1), Col("count", "count", 5), Col("share", "share", 5),
                   Col("trend", "trend", 7, priority=1), Col("examples", "examples", 8, grow=1, priority=2)]
LABEL_ROLLOUT_COLUMNS = [Col("id", "id", 2), Col("step", "step", 4), Col("reward", "reward", 6),
                         Col("evidence", "evidence", 12, grow=1)]


def round_row(r: dict) -> tuple[str, dict]:
    """(row key, cells) of one evolution round; a round still running says so."""
    summary = r.get("summary")
    return str(r["id"]), {"round": r["id"], "step": r["step"], "H": r.get("harness_version"),
                          "labels": len(loads(r.get("failure_table_json"), []) or []),
                          "summary": cells.status("running") if summary == "running" else cells.plain(summary)}


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
        yield FittedTable(ROUND_COLUMNS, id="g-rounds")
        with Container(classes="split", id="g-split"):
            yield FittedTable(FAILURE_COLUMNS, id="g-table")
            yield FittedTable(LABEL_ROLLOUT_COLUMNS, id="g-rollouts")

    def on_mount(self) -> None:
        self.query_one("#g-rounds", DataTable).border_title = "evolution rounds"
        self.query_one("#g-table", DataTable).border_title = "failure table"
        self.query_one("#g-rollouts", DataTable).border_title = "rollouts with the label"

    def update_body(self, changed: set[str]) -> None:
        """Every round, newest first; a round seen running is redrawn in place when it finishes."""
        table = self.query_one("#g-rounds", FittedTable)
        rounds = sorted(self.app.state.rounds, key=lambda r: -r["id"])
        table.set_rows([round_row(r) for r in rounds])
        if rounds and (self.round is None or self.round["id"] not in {r["id"] for r in rounds}):
            self._show_round(rounds[0])
        elif self.round is not None:  # the shown round may have finished: its failure table too
            now = next(r for r in rounds if r["id"] == self.round["id"])
            if now != self.round:
                self._show_round(now)
        table.border_title = "evolution rounds · newest first" if rounds else \
            self.app.state.waiting_for_round("evolution round").rstrip(".")

    @on(DataTable.RowHighlighted, "#g-rounds")
    def _round_highlighted(self, message: DataTable.RowHighlighted) -> None:
        rid = int(message.row_key.value)
        if self.round is None or self.round["id"] != rid:  # not a redraw of the same round
            self._show_round(next(r for r in self.app.state.rounds if r["id"] == rid))

    def _show_round(self, rnd: dict) -> None:
        self.round = rnd
        table = self.query_one("#g-table", FittedTable)
        rows = []
        for row in loads(rnd.get("failure_table_json"), []) or []:
            examples = " ".join(str(e) for e in (row.get("examples") or [])[:4])
            label = cells.plain(row.get("label"))
            if row.get("validity"):
                label.append(" ⚠", style="bold red")  # a validity label: a reward hack, blocks promotion
            rows.append((str(row.get("label")), {
                "label": label, "count": row.get("count"), "share": cells.number(row.get("share"), ".0%"),
                "trend": trend_cell(row.get("trend")), "examples": cells.plain(examples)}))
        table.set_rows(rows, keep_cursor=False)
        table.border_title = f"failure table · round {rnd['id']} (step {rnd['step']})"
        if table.data:
            self._show_label(table.data[0][0])

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
        table = self.query_one("#g-rollouts", FittedTable)
        table.set_rows([(str(r["id"]), {"id": r["id"], "step": r["step"], "reward": cells.number(r["reward"]),
                                        "evidence": cells.plain(r.get("evidence") or r.get("labels"))})
                        for r in message.rows], keep_cursor=False)
        table.border_title = f"{message.label} · {len(message.rows)} rollouts (o: all in Rollouts)"

    @on(DataTable.RowSelected, "#g-table")
    def _label_selected(self) -> None:
        self.action_open_label()

    def action_open_label(self) -> None:
        if self.label:
            self.app.post_message(LabelChosen(self.label))
