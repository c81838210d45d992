"""Skills: the library of interventions that helped, searchable; each card's trigger, change, evidence, uses."""

from __future__ import annotations

import json

from textual import on, work
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Input, Static

from backend.store.reader import skill, skills
from evotui.components import cells
from evotui.components.fitted_table import Col, FittedTable
from evotui.components.run_screen import RunScreen
from evotui.messages import SkillFetched, SkillsFetched


def card(s: dict) -> Content:
    """A skill card: what triggers it, what it changes, the evidence, how often it was used and helped."""
    lines = [Content.assemble(Content.styled(s["name"], "bold"), Content.styled(f"  {s.get('domain') or ''} · "
                              f"from {s.get('source') or '?'} · used {s.get('uses') or 0}× · helped "
                              f"{s.get('helped') or 0}×", "$text-muted"))]
    for key, title in (("trigger", "Trigger"), ("change", "Change"), ("evidence", "Evidence")):
        lines.append(Content.styled(f"\n{title}", "bold $text-accent"))
        value = s.get(key)
        items = value.items() if isinstance(value, dict) else [("", value)]
        for k, v in items:
            text = v if isinstance(v, str) else json.dumps(v)
            lines.append(Content(f"  {k}: {text}" if k else f"  {text}"))
    return Content("\n").join(lines)


SKILL_COLUMNS = [Col("name", "name", 18, grow=2), Col("domain", "domain", 6, priority=2), Col("uses", "uses", 4),
                 Col("helped", "helped", 6), Col("source", "source", 12, grow=1, priority=1)]


def empty_library(text: str) -> str:
    """What the card pane says when no skill is listed."""
    if text.strip():
        return f"No skill matches '{text.strip()}' (its name, domain, trigger, change or evidence)."
    return ("The skill library is empty. A promoted intervention becomes a skill when the next held-out "
            "validation shows it helped; `evotui skills import RUN PATH` brings in skills from other runs.")


class SkillsScreen(RunScreen):
    """Search the skill library and read its cards."""

    TOPICS = frozenset({"skills"})
    AUTO_FOCUS = "#s-table"
    BINDINGS = [
        Binding("slash", "search", "Search", key_display="/", tooltip="Search skills by name, trigger, change"),
        Binding("escape", "focus_table", "Table", show=False, tooltip="Back to the skills table"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.query_text = ""
        self.selected: int | None = None

    def compose_body(self):
        yield Input(placeholder="/ search skills", id="s-search", compact=True)
        with Container(classes="split", id="s-split"):
            yield FittedTable(SKILL_COLUMNS, id="s-table")
            with VerticalScroll(id="s-view", classes="pane"):
                yield Static("", id="s-card")

    def on_mount(self) -> None:
        self.query_one(DataTable).border_title = "skill library"

    def update_body(self, changed: set[str]) -> None:
        self._fetch(self.query_text)

    @on(Input.Changed, "#s-search")
    def _search(self, message: Input.Changed) -> None:
        self.query_text = message.value
        self._fetch(message.value)

    @on(Input.Submitted, "#s-search")
    def action_focus_table(self) -> None:
        self.query_one(DataTable).focus()

    @work(thread=True, exclusive=True, group="skills", exit_on_error=False)
    def _fetch(self, text: str) -> None:
        self.post_message(SkillsFetched(text, self.app.reader("misc").call(skills, text)))

    def on_skills_fetched(self, message: SkillsFetched) -> None:
        if message.text != self.query_text:
            return
        table = self.query_one(FittedTable)
        table.set_rows([(str(s["id"]), {"name": cells.plain(s["name"]), "domain": cells.plain(s.get("domain")),
                                        "uses": s.get("uses") or 0, "helped": s.get("helped") or 0,
                                        "source": cells.plain(s.get("source"))}) for s in message.rows])
        table.border_title = f"skill library · {len(message.rows)}" + (f" matching '{self.query_text}'"
                                                                      if self.query_text else "")
        if not message.rows:
            self.query_one("#s-card", Static).update(Content.styled(empty_library(self.query_text), "$text-muted"))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, message: DataTable.RowHighlighted) -> None:
        self.selected = int(message.row_key.value)
        self._fetch_card(self.selected)

    @work(thread=True, exclusive=True, group="skill", exit_on_error=False)
    def _fetch_card(self, sid: int) -> None:
        self.post_message(SkillFetched(self.app.reader("detail").call(skill, sid)))

    def on_skill_fetched(self, message: SkillFetched) -> None:
        if message.card and message.card["id"] == self.selected:
            self.query_one("#s-card", Static).update(card(message.card))

    def action_search(self) -> None:
        self.query_one("#s-search").focus()


