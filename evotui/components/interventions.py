"""Interventions: the queue (waiting for the operator) and the history, with approve / veto.

Commands are rows in `commands`; what the operator sees moves from
"pending" to the engine's acknowledgement (applied or rejected) on the next poll.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import DataTable

from backend.store.reader import intervention_detail, loads
from evotui.components import cells
from evotui.components.fitted_table import Col, FittedTable
from evotui.components.intervention_detail import InterventionDetail
from evotui.components.run_screen import RunScreen
from evotui.components.status_bar import auto_promote_text
from evotui.messages import InterventionDetailFetched

QUEUE_ORDER = {"passed": 0, "inconclusive": 1, "backtesting": 2, "proposed": 3}
FOLD_AFTER_ROUNDS = 3  # inconclusive candidates this many rounds old fold away (i shows them)
COLUMNS = [  # the decision next to the title: what the operator weighs before approving
    Col("id", "id", 3), Col("status", "status", 12), Col("title", "title", 28, grow=3),
    Col("effect", "effect [95% CI]", 23, priority=1), Col("p", "p", 6, priority=2), Col("n", "n", 4, priority=2),
    Col("kind", "kind", 10, priority=3), Col("target", "target", 14, grow=1, priority=4),
    Col("score", "score", 6, priority=5),
]


def queue_first(rows: list[dict]) -> list[dict]:
    """Waiting for the operator first (passed, then inconclusive), then in progress, then the history."""
    return sorted(rows, key=lambda r: (QUEUE_ORDER.get(r["status"], 4), -r["id"]))


def readable_queue(rows: list[dict], latest_round: int, show_old: bool = False) -> tuple[list[tuple[dict, int]], int]:
    """What the table shows: (row, how many identical rows it stands for), queue first, and how
    many old inconclusive rows are folded away. Identical rows (same status, kind, target and
    title) collapse into the newest; inconclusive ones `FOLD_AFTER_ROUNDS` rounds old fold
    unless `show_old`.

    >>> rows = [{"id": i, "status": "inconclusive", "kind": "k", "target": "t", "title": "x", "round_id": r}
    ...         for i, r in ((1, 1), (2, 5), (3, 5))]
    >>> [(r["id"], n) for r, n in readable_queue(rows, 5)[0]], readable_queue(rows, 5)[1]
    ([(3, 2)], 1)
    """
    shown: dict[tuple, list] = {}
    folded = 0
    for r in queue_first(rows):
        old = latest_round - (r.get("round_id") or latest_round) >= FOLD_AFTER_ROUNDS
        if r["status"] == "inconclusive" and old and not show_old:
            folded += 1
            continue
        same = (r["status"], r.get("kind"), r.get("target"), r.get("title"))
        if same in shown:
            shown[same][1] += 1
        else:
            shown[same] = [r, 1]
    return [(r, n) for r, n in shown.values()], folded


def effect_cell(d: dict | None) -> str:
    """`+0.031 [-0.012, +0.074]` for a decision's effect and 95% interval; a dash without one."""
    if not d or d.get("effect") is None:
        return "–"
    return f"{d['effect']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


class InterventionsScreen(RunScreen):
    """Review backtested harness changes; `a` approves, `A` approves an inconclusive one,
    `v` vetoes, `p` toggles auto-promote."""

    TOPICS = frozenset({"interventions", "commands", "run", "rounds"})  # rounds: old inconclusive fold
    AUTO_FOCUS = "#i-table"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (200, "-wide")]  # titles and diffs both want the full width
    BINDINGS = [
        Binding("a", "approve", "Approve", tooltip="Approve the selected passed intervention"),
        Binding("A", "approve_inconclusive", "Approve inconclusive", show=False,
                tooltip="Approve the selected inconclusive intervention anyway (its interval misses min_gain)"),
        Binding("v", "veto", "Veto", tooltip="Veto the selected intervention (asks for a reason)"),
        Binding("p", "app.auto_promote", "Auto-promote", tooltip="Turn auto-promote on or off (asks first)"),
        Binding("d", "diff", "Diff", tooltip="Scroll the detail to the harness diff"),
        Binding("i", "toggle_old", "Old inconclusive", show=False, tooltip=f"Show or fold the inconclusive candidates "
                f"{FOLD_AFTER_ROUNDS} or more rounds old"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selected: int | None = None
        self.detail: dict | None = None
        self.show_old = False  # the old inconclusive candidates are shown (i)
        self.folded = 0  # old inconclusive candidates folded away now

    def compose_body(self):
        with Container(classes="split", id="i-split"):
            yield FittedTable(COLUMNS, id="i-table")
            yield InterventionDetail(id="i-detail")

    def update_body(self, changed: set[str]) -> None:
        if changed & {"interventions", "commands", "rounds"}:
            self._fill()
        if "interventions" in changed and self.selected is not None:
            self._fetch(self.selected)
        if "commands" in changed and self.selected is not None:
            self.query_one(InterventionDetail).show_commands(self._commands(self.selected))
        self._retitle()

    def _retitle(self) -> None:
        auto = auto_promote_text(bool(self.app.state.run.get("auto_promote")), self.app.asked_auto_promote())
        fold = (f" · {self.folded} old inconclusive folded (i)" if self.folded else
                " · old inconclusive shown (i folds)" if self.show_old else "")
        self.query_one(DataTable).border_title = f"queue · history{fold}   {auto}"

    def _latest_round(self) -> int:
        state = self.app.state
        return max([r["id"] for r in state.rounds] + [r.get("round_id") or 0 for r in state.interventions] + [0])

    def _fill(self) -> None:
        rows = []
        shown, self.folded = readable_queue(self.app.state.interventions, self._latest_round(), self.show_old)
        for r, count in shown:
            waiting = self._commands(r["id"], pending_only=True)
            status = cells.status(r["status"])
            if waiting:
                status.append(f" ⧗{waiting[-1]['verb']}", style="italic")
            d = r.get("decision") or {}
            title = cells.plain(r.get("title"))
            if count > 1:
                title = Text.assemble((f"×{count} ", "bold"), title, no_wrap=True, overflow="ellipsis")
            rows.append((str(r["id"]), {
                "id": r["id"], "status": status, "title": title,
                "effect": cells.plain(effect_cell(d)), "p": cells.number(d.get("p_value"), ".3f"),
                "n": cells.number(d.get("n"), "d"), "kind": cells.plain(r.get("kind")),
                "target": cells.plain(r.get("target")), "score": cells.number(r.get("score"), "+.2f")}))
        self.query_one(FittedTable).set_rows(rows)
        if not rows:
            self.query_one(InterventionDetail).show_message(self.app.state.waiting_for_round("interventions"))

    def _commands(self, iid: int, pending_only: bool = False) -> list[dict]:
        """The operator's approve / veto commands on intervention `iid`, oldest first."""
        out = [c for c in self.app.state.commands.values()
               if c["verb"] in ("approve", "veto") and (loads(c.get("arg_json"), {}) or {}).get("id") == iid
               and (not pending_only or c["status"] == "pending")]
        return sorted(out, key=lambda c: c["id"])

    @on(DataTable.RowHighlighted)
    def _highlighted(self, message: DataTable.RowHighlighted) -> None:
        iid = int(message.row_key.value)
        if iid != self.selected:
            self.selected = iid
            self._fetch(iid)

    @work(thread=True, exclusive=True, group="intervention", exit_on_error=False)
    def _fetch(self, iid: int) -> None:
        self.post_message(InterventionDetailFetched(self.app.reader("detail").call(intervention_detail, iid)))

    def on_intervention_detail_fetched(self, message: InterventionDetailFetched) -> None:
        d = message.detail
        if d is None or d["id"] != self.selected:
            return
        self.detail = d
        self.query_one(InterventionDetail).show(d, self._commands(d["id"]))

    # ------------------------------------------------------------ actions
    # The checks, confirmations and refusals live in one place for every screen and the
    # palette (evotui/components/operator.py); the keys here name the selected row.
    def action_approve(self) -> None:
        self.app.request_approve(self.selected)

    def action_approve_inconclusive(self) -> None:
        """The explicit approval an inconclusive candidate needs (auto mode never promotes one)."""
        self.app.request_approve(self.selected, inconclusive=True)

    def action_veto(self) -> None:
        self.app.request_veto(self.selected)

    def action_toggle_old(self) -> None:
        self.show_old = not self.show_old
        self._fill()
        self._retitle()

    def action_diff(self) -> None:
        self.query_one(InterventionDetail).scroll_to_diff()
