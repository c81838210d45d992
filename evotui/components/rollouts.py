"""Rollouts: a live table, newest first, paged through SQL (keyset), with filters and a detail pane.

Only pages are ever loaded: the first page for the filter, older pages as the
cursor nears the bottom, and, while the cursor sits on the newest row, the
rows that arrived since (follow mode). Elsewhere the title says new rows wait.
"""

from __future__ import annotations

from textual import on, work
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import DataTable, Input

from backend.store.reader import PAGE, RolloutFilter, filter_choices, rollout_detail, rollout_page
from evotui.components import cells
from evotui.components.fitted_table import Col, FittedTable
from evotui.components.rollout_detail import RolloutDetail
from evotui.components.rollout_filters import RolloutFilterBar
from evotui.components.run_screen import RunScreen
from evotui.components.sync import worker_cancelled
from evotui.messages import FilterChoicesFetched, RolloutDetailFetched, RolloutsFetched

COLUMNS = [
    Col("id", "id", 6), Col("step", "step", 4), Col("domain", "domain", 6, priority=2), Col("reward", "reward", 6),
    Col("verdict", "verdict", 9), Col("H", "H", 2, priority=3), Col("finish", "finish", 6, priority=1),
    Col("labels", "labels", 16, grow=1),
]
PREFETCH_ROWS = 5  # fetch the older page this many rows before the bottom


class RolloutsScreen(RunScreen):
    """Every rollout of the run, filterable, with its evidence."""

    TOPICS = frozenset({"rollouts", "versions", "rounds"})
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]  # side by side only when both fit
    AUTO_FOCUS = "#r-table"
    BINDINGS = [
        Binding("slash", "search", "Search", key_display="/", tooltip="Search prompts, completions, tasks"),
        Binding("f", "focus_filters", "Filters", tooltip="Move to the filter bar"),
        Binding("c", "clear_filters", "Clear", tooltip="Clear every rollout filter"),
        Binding("n", "newest", "Newest", tooltip="Jump to the newest rollouts (follow mode)"),
        Binding("escape", "focus_table", "Table", show=False, tooltip="Back to the rollouts table"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = RolloutFilter()
        self.rows: list[dict] = []
        self.has_more = False
        self.new_waiting = False
        self.fetched = False  # the first page for `filter` has arrived (False: searching)
        self.pending_label: str | None = None
        self.detail_shown = False  # the detail pane shows a rollout or says why it shows none

    def compose_body(self):
        yield RolloutFilterBar()
        with Container(id="r-split", classes="split"):
            yield FittedTable(COLUMNS, id="r-table")
            yield RolloutDetail(id="r-detail")

    def on_mount(self) -> None:
        self._fetch_choices()
        if self.pending_label:
            self.filter_by_label(self.pending_label)
        else:
            self._fetch_top()

    def settled(self) -> bool:
        """The first page, the filter bar's controls and the detail of the row under the cursor are in."""
        return self.fetched and self.query_one(RolloutFilterBar).built and self.detail_shown

    # ------------------------------------------------------------ fetching
    def _fetch_top(self) -> None:
        if any(w.group == "rollouts" and w.is_running for w in self.workers):
            self.app.reader("rollouts").interrupt()  # the old filter's query is moot
        self.workers.cancel_group(self, "rollouts-older")
        self.fetched = False
        self._fetch(self.filter, "top", None)
        self._retitle()

    @work(thread=True, exclusive=True, group="rollouts", exit_on_error=False)
    def _fetch(self, flt: RolloutFilter, mode: str, key: int | None) -> None:
        rows = self.app.reader("rollouts").call(
            rollout_page, flt, before=key if mode == "older" else None, after=key if mode == "newer" else None)
        if not worker_cancelled():
            self.post_message(RolloutsFetched(flt, mode, rows))

    @work(thread=True, exclusive=True, group="rollouts-older", exit_on_error=False)
    def _fetch_older(self, flt: RolloutFilter, before: int) -> None:
        rows = self.app.reader("rollouts-older").call(rollout_page, flt, before=before)
        if not worker_cancelled():
            self.post_message(RolloutsFetched(flt, "older", rows))

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def _fetch_detail(self, rid: int) -> None:
        detail = self.app.reader("detail").call(rollout_detail, rid)
        if not worker_cancelled():
            self.post_message(RolloutDetailFetched(detail))

    @work(thread=True, exclusive=True, group="choices", exit_on_error=False)
    def _fetch_choices(self) -> None:
        self.post_message(FilterChoicesFetched(self.app.reader("misc").call(filter_choices)))

    # ------------------------------------------------------------ results
    def on_rollouts_fetched(self, message: RolloutsFetched) -> None:
        if message.flt != self.filter:
            return  # an answer to a filter the operator has already changed
        if message.mode == "newer" and len(message.rows) >= PAGE:
            self._fetch_top()  # a burst bigger than a page: start over from the top
            return
        if message.mode == "newer" and not message.rows:
            return  # nothing arrived: the table (and its render cache) stays as it is
        if message.mode == "older":
            self.rows += message.rows
            self.has_more = len(message.rows) >= PAGE
            self._add_rows(message.rows)
        else:
            self.rows = message.rows + (self.rows if message.mode == "newer" else [])
            if message.mode == "top":
                self.has_more = len(message.rows) >= PAGE
                self.fetched = True
                self.query_one(RolloutFilterBar).build()  # the page first, the filter bar next
            self.new_waiting = False
            self._rebuild()
        self._retitle()

    def on_filter_choices_fetched(self, message: FilterChoicesFetched) -> None:
        self.query_one(RolloutFilterBar).set_choices(message.choices)

    def on_rollout_detail_fetched(self, message: RolloutDetailFetched) -> None:
        self.query_one(RolloutDetail).show(message.detail)
        self.detail_shown = True

    def _rebuild(self) -> None:
        self.query_one(FittedTable).set_rows([table_row(r) for r in self.rows], keep_cursor=False)  # follow mode
        if not self.rows:
            self.query_one(RolloutDetail).show_message(self._nothing_shown())
            self.detail_shown = True

    def _add_rows(self, rows: list[dict]) -> None:
        self.query_one(FittedTable).append_rows([table_row(r) for r in rows])

    def _nothing_shown(self) -> str:
        if not self.filter.is_empty():
            return "No rollout matches the filter (c clears it)."
        if self.app.state.steps:
            return "No rollouts stored in this run."
        return "No rollouts yet: the first training step stores its rollouts here, newest first."

    def _retitle(self) -> None:
        parts = [f"{len(self.rows)} loaded" if self.fetched else "searching…"]
        if self.has_more:
            parts.append("more below")
        if self.new_waiting:
            parts.append("new rollouts above: n")
        if not self.filter.is_empty():
            parts.append("filtered")
        self.query_one(DataTable).border_title = "rollouts · " + " · ".join(parts)

    # ------------------------------------------------------------ events
    @on(RolloutFilterBar.Changed)
    def _filter_changed(self, message: RolloutFilterBar.Changed) -> None:
        self.filter = message.flt
        self._fetch_top()

    @on(Input.Submitted)
    def _search_submitted(self, message: Input.Submitted) -> None:
        """Enter in a filter field: the filter applies and the keys go back to the table (digits
        switch screens again)."""
        if not message.input.has_class("-invalid"):
            self.action_focus_table()

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        if message.row_key.value is None:
            return
        self._fetch_detail(int(message.row_key.value))
        near_end = message.cursor_row >= len(self.rows) - PREFETCH_ROWS
        loading = any(w.group == "rollouts-older" and w.is_running for w in self.workers)
        if near_end and self.has_more and not loading and self.rows:
            self._fetch_older(self.filter, self.rows[-1]["id"])

    def _busy(self, group: str) -> bool:
        return any(w.group == group and w.is_running for w in self.workers)

    def update_body(self, changed: set[str]) -> None:
        if changed & {"versions", "rounds"} and not self._busy("choices"):
            self._fetch_choices()
        if "rollouts" in changed and self.is_mounted:
            if self.query_one(DataTable).cursor_row <= 0 and self.rows:
                self._fetch(self.filter, "newer", self.rows[0]["id"])
            elif not self.rows and not self._busy("rollouts"):  # the first page is already on its way
                self._fetch_top()
            else:
                self.new_waiting = True
                self._retitle()

    def filter_by_label(self, label: str) -> None:
        """Show only rollouts with `label` (the Diagnoses screen sends the operator here)."""
        if not self.is_mounted:
            self.pending_label = label
            return
        self.query_one(RolloutFilterBar).set_label(label)
        self.query_one(DataTable).focus()

    # ------------------------------------------------------------ actions
    def action_search(self) -> None:
        self.query_one(RolloutFilterBar).focus_control("#f-text")

    def action_focus_filters(self) -> None:
        self.query_one(RolloutFilterBar).focus_control("#f-domain")

    def action_focus_table(self) -> None:
        self.query_one(DataTable).focus()

    def action_clear_filters(self) -> None:
        self.query_one(RolloutFilterBar).clear()

    def action_newest(self) -> None:
        table = self.query_one(DataTable)
        table.move_cursor(row=0)
        self._fetch_top()


def table_row(r: dict) -> tuple[str, dict]:
    """(row key, cells) of one rollout in the table."""
    return str(r["id"]), {
        "id": r["id"], "step": r["step"], "domain": cells.plain(r["domain"]), "reward": cells.number(r["reward"]),
        "verdict": cells.verdict(r["verdict"]), "H": r["harness_version"], "finish": cells.plain(r["finish"]),
        "labels": cells.plain((r["labels"] or "").replace(",", " "))}
