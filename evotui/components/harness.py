"""Harness: the current harness file, highlighted, its version lineage with diffs, and the
population's frontier (the versions proposals branch from, `backend/evolve/frontier.py`).

A hand edit becomes an intervention: `e` opens `RUN_DIR/harness.draft.py` (the
operator's draft, started from the active version) in $EDITOR; the app notices
a new text in the draft or in `harness.py` and sends a `propose_edit` command,
and the engine backtests it like any other candidate (`backend/harness/run_file.py`
keeps `harness.py` equal to the active version).
"""

from __future__ import annotations

import os
import subprocess

from textual import on, work
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.widgets import DataTable, Static

from backend.harness import run_file
from backend.store.reader import harness_version
from evotui.components import cells
from evotui.components.code_view import CodeView
from evotui.components.diff_view import DiffView, make_diff
from evotui.components.fitted_table import Col, FittedTable
from evotui.components.run_screen import RunScreen
from evotui.messages import FrontierFetched, HarnessVersionFetched


VERSION_COLUMNS = [Col("v", "v", 4), Col("parent", "parent", 6, priority=1), Col("status", "status", 10),
                   Col("iv", "iv", 3, priority=2), Col("note", "note", 16, grow=1)]


def version_row(v: dict, active: int | None) -> tuple[str, dict]:
    """A version's row; the run's active version is marked ●, whatever its stored status says."""
    return str(v["id"]), {"v": f"{'●' if v['id'] == active else ' '}{v['id']}", "parent": v.get("parent") or "–",
                          "status": cells.status(v.get("status")), "iv": v.get("intervention_id") or "",
                          "note": cells.plain(v.get("note"))}


class HarnessScreen(RunScreen):
    """Versions on the left; the selected version's code or its diff to its parent on the right."""

    TOPICS = frozenset({"versions", "run", "rounds"})
    AUTO_FOCUS = "#h-table"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]  # code wants the full width
    BINDINGS = [
        Binding("d", "toggle_diff", "Code/diff", tooltip="Show the code or the diff to the parent version"),
        Binding("e", "edit", "Edit draft", tooltip="Edit RUN_DIR/harness.draft.py in $EDITOR (saved, it is proposed)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selected: int | None = None
        self.show_diff = False
        self.version: dict | None = None
        self.parent_version: dict | None = None

    def compose_body(self):
        with Container(classes="split", id="h-split"):
            yield FittedTable(VERSION_COLUMNS, id="h-table")
            with VerticalScroll(id="h-view"):
                yield Static("", id="h-frontier")
                yield Static("", id="h-head")
                yield CodeView(id="h-code")
                yield DiffView(id="h-diff")

    def on_mount(self) -> None:
        self.query_one(FittedTable).border_title = "versions (● active)"

    def update_body(self, changed: set[str]) -> None:
        table = self.query_one(FittedTable)
        current = self.app.state.current_version
        table.set_rows([version_row(v, current) for v in reversed(self.app.state.versions)])
        target = self.selected or current
        if target is not None and str(target) in table.rows:
            table.move_cursor(row=table.get_row_index(str(target)))
        if not self.app.state.versions:
            self.query_one("#h-head", Static).update("No harness version yet: the engine records v1 when it starts.")
        if changed & {"versions", "rounds"}:
            self._fetch_frontier(int(self.app.state.setting("evolve", "frontier", None)
                                     or self.app.state.setting("evolve", "population", 4) or 4))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, message: DataTable.RowHighlighted) -> None:
        vid = int(message.row_key.value)
        if vid != self.selected:
            self.selected = vid
            self.show_diff = vid != self.app.state.current_version
            self._fetch(vid)

    @work(thread=True, exclusive=True, group="harness", exit_on_error=False)
    def _fetch(self, vid: int) -> None:
        reader = self.app.reader("detail")
        version = reader.call(harness_version, vid)
        parent = reader.call(harness_version, version["parent"]) if version and version.get("parent") else None
        self.post_message(HarnessVersionFetched(version, parent))

    @work(thread=True, exclusive=True, group="frontier", exit_on_error=False)
    def _fetch_frontier(self, k: int) -> None:
        from backend.evolve.frontier import frontier_now  # the engine's rule, loaded off the UI thread
        from backend.store.search import SearchOver

        members = self.app.reader("detail").call(lambda db: [m.to_dict() for m in frontier_now(SearchOver(db), k)])
        self.post_message(FrontierFetched(members))

    def on_frontier_fetched(self, message: FrontierFetched) -> None:
        parts = [f"v{m['version']}{'●' if m['status'] == 'active' else ''} {m['score']:.2f} "
                 f"({m['passed']}/{m['children']} passed)" for m in message.members]
        self.query_one("#h-frontier", Static).update("frontier: " + ("  ·  ".join(parts) or "–"))

    def on_harness_version_fetched(self, message: HarnessVersionFetched) -> None:
        if message.version is None or message.version["id"] != self.selected:
            return
        self.version = message.version
        self.parent_version = message.parent
        self._redraw()

    def _redraw(self) -> None:
        v = self.version
        if v is None:
            return
        chain = " ← ".join(f"v{i}" for i in self._lineage(v["id"]))
        current = " (active: harness.py)" if v["id"] == self.app.state.current_version else ""
        what = f"diff to v{v['parent']}" if self.show_diff and v.get("parent") else "code"
        head = f"{v.get('status')} · lineage {chain} · sha {v.get('sha') or ''} · {v.get('note') or ''}"
        if (self.app.run_dir / run_file.DRAFT).exists():
            head += f"\nyour draft: {run_file.DRAFT} in the run folder (e edits it; each save is proposed)"
        self.query_one("#h-head", Static).update(head)
        self.query_one("#h-view").border_title = f"v{v['id']}{current} · {what}  (d: code/diff)"
        self.query_one(CodeView).show(v.get("code") or "")
        diff = v.get("diff") or (make_diff(self.parent_version["code"], v["code"], f"v{v['parent']}", f"v{v['id']}")
                                 if self.parent_version else "")
        self.query_one(DiffView).show(diff)
        self.query_one(CodeView).display = not (self.show_diff and v.get("parent"))
        self.query_one(DiffView).display = not self.query_one(CodeView).display

    def _lineage(self, vid: int) -> list[int]:
        parents = {v["id"]: v.get("parent") for v in self.app.state.versions}
        chain = []
        while vid is not None and vid not in chain:
            chain.append(vid)
            vid = parents.get(vid)
        return chain

    def action_toggle_diff(self) -> None:
        self.show_diff = not self.show_diff
        self._redraw()

    def action_edit(self) -> None:
        path = run_file.start_draft(self.app.run_dir)  # harness.py stays the active version
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with self.app.suspend():
            subprocess.run([*editor.split(), str(path)], check=False)
        self.app.check_harness_edit()
