"""The red banner that says the engine died, its last words and how to resume: two rows at most."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from evotui.engine_process import EngineHealth


class EngineBanner(Static):
    """Hidden while the engine is healthy. When it is not: what happened on the first row; the R
    key and the engine's last words (runs.error, else the last line of engine.log) on the second.
    Each row is cut with an ellipsis; the whole log is on the Log screen (7)."""

    DEFAULT_CSS = """
    EngineBanner {
        display: none; height: auto; max-height: 2; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis;
        background: $error-muted; color: $text; border-left: thick $error;
    }
    EngineBanner.-dead { display: block; }
    """

    def show(self, health: EngineHealth) -> None:
        self.set_class(health.dead, "-dead")
        if not health.dead:
            return
        last = health.detail[-1].strip() if health.detail else ""
        self.update(Content("\n").join([
            Content.styled(health.message, "bold"),
            Content.assemble(Content.styled("R resumes (nothing stored is lost)", "$text-warning"),
                             Content.styled(f" · {last}" if last else "", "$text-muted"))]))
