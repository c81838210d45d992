"""The population screen: its members, their validation curves, and its lineage of copies and moves.

    members   member · seed · step · harness version · validation (95% CI, n) · parent
    curves    validation accuracy by step, one line per member (components/metric_plot.py)
    lineage   every copy and move: the evidence that decided it, its status and its outcome

It shows a `PopulationView` (backend/tools/population_view.py) the app reads
off the UI thread; `show(view)` redraws from it. The lineage table's cursor is
the move `a` approves and `v` vetoes (population_app.py).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from backend.population.store import Event
from backend.tools.population_view import MemberView, PopulationView
from evotui.components.metric_plot import Drawn, MetricPlot, lines

MEMBER_COLUMNS = ("member", "seed", "step", "harness", "validation", "95% CI", "n", "parent", "status")
EVENT_COLUMNS = ("#", "step", "kind", "member", "parent", "status", "evidence (member - best)", "change", "outcome")


def draw_members(plt, view: PopulationView | None) -> Drawn:
    """Validation accuracy by step, one line per member."""
    if view is None:
        return Drawn()
    return lines(plt, [(m.name, [x for x, _ in m.curve], [y for _, y in m.curve]) for m in view.members],
                 unit=True)


def no_curve(view: PopulationView | None) -> str:
    if view is None:
        return "reading the population…"
    return f"no validation yet: members evaluate every {view.population.every} steps"


def member_cells(m: MemberView, reported: int | None) -> tuple[str, ...]:
    """One members-table row; the reported member is marked with `*`."""
    val, ci, n = ("-", "-", "0")
    if m.val is not None:
        lo, hi = m.val.interval
        val, ci, n = f"{m.val.acc:.3f}", f"[{lo:.3f}, {hi:.3f}]", str(m.val.n)
    steps = f"{m.step}/{m.steps_total}" if m.steps_total else str(m.step)
    return (m.name + (" *" if m.idx == reported else ""), str(m.seed), steps,
            "-" if m.harness_version is None else f"v{m.harness_version}", val, ci, n,
            "-" if m.parent is None else f"m{m.parent}", m.status)


def event_cells(e: Event) -> tuple[str, ...]:
    """One lineage-table row."""
    ev = e.evidence
    evidence = f"{ev.diff:+.3f} [{ev.low:+.3f}, {ev.high:+.3f}] n {ev.n}" if ev.n else "-"
    if e.knob:
        change = f"{e.knob} {e.old_value} → {e.new_value}"
    elif e.kind == "copy":
        change = f"policy v{e.policy_version}" if e.policy_version is not None else "adapter, optimizer, harness"
    else:
        change = "-"
    outcome = (f"{e.outcome} {e.outcome_diff:+.3f} [{e.outcome_low:+.3f}, {e.outcome_high:+.3f}]"
               if e.outcome else "-")
    return (str(e.id), str(e.step), e.kind, f"m{e.member}", f"m{e.parent}", e.status, evidence, change, outcome)


class PopulationScreen(Screen):
    """Members, curves and lineage of one population."""

    DEFAULT_CSS = """
    PopulationScreen #summary { height: auto; padding: 0 1; }
    PopulationScreen #members { height: auto; max-height: 12; }
    PopulationScreen #curves { height: 1fr; min-height: 6; max-height: 14; }
    PopulationScreen #events { height: 1fr; min-height: 6; }
    """
    BINDINGS = [
        Binding("a", "app.approve_move", "Approve move", tooltip="Approve the selected pending move (asks first)"),
        Binding("v", "app.veto_move", "Veto move", tooltip="Veto the selected pending move (asks first)"),
        Binding("f5", "app.refresh", "Refresh", show=False, tooltip="Read the population now"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the population…", id="summary")
        yield DataTable(id="members", cursor_type="row", zebra_stripes=True)
        yield MetricPlot("validation accuracy by member", draw_members, no_curve, id="curves")
        yield DataTable(id="events", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#members", DataTable).add_columns(*MEMBER_COLUMNS)
        self.query_one("#members", DataTable).border_title = "members"
        self.query_one("#events", DataTable).add_columns(*EVENT_COLUMNS)
        self.query_one("#events", DataTable).border_title = "lineage: copies and moves"
        self.query_one("#events", DataTable).focus()

    def show(self, view: PopulationView) -> None:
        """Redraw from a new snapshot; the lineage cursor stays on the same event."""
        p = view.population
        pending = len(view.pending())
        mode = "supervised: a approves, v vetoes the selected pending move" if view.supervised else "autonomous"
        self.query_one("#summary", Static).update(
            f"{view.dir}  ·  {p.mode} mode, {p.size} members, compared every {p.every} steps  ·  "
            f"step {p.step}/{p.steps_total}, {p.status}  ·  {mode}"
            + (f"  ·  {pending} move(s) pending" if pending else ""))
        members = self.query_one("#members", DataTable)
        members.clear()
        for m in view.members:
            members.add_row(*member_cells(m, view.reported), key=str(m.idx))
        events = self.query_one("#events", DataTable)
        keep = self.selected_event()
        events.clear()
        for e in view.events:
            events.add_row(*event_cells(e), key=str(e.id))
        if keep is not None and keep in {e.id for e in view.events}:
            events.move_cursor(row=events.get_row_index(str(keep)))
        self.query_one("#curves", MetricPlot).show(view)

    def selected_event(self) -> int | None:
        """The id of the event under the lineage table's cursor (None: the table is empty)."""
        events = self.query_one("#events", DataTable)
        if not events.row_count:
            return None
        key = events.coordinate_to_cell_key(events.cursor_coordinate).row_key
        return int(key.value) if key.value is not None else None
