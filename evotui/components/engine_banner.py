"""The red banner that says the engine died, with its last words and how to resume."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from evotui.engine_process import EngineHealth


class EngineBanner(Static):
    """Hidden while the engine is healthy; shows the engine.log tail and runs.error when it is not."""

    DEFAULT_CSS = """
    EngineBanner {
        display: none; height: auto; max-height: 9; padding: 0 1;
        background: $error-muted; color: $text; border-left: thick $error;
    }
    EngineBanner.-dead { display: block; }
    """

    def show(self, health: EngineHealth) -> None:
        self.set_class(health.dead, "-dead")
        if not health.dead:
            return
        lines = [Content.styled(health.message, "bold"),
                 Content.styled("  Press R to resume the run; nothing stored is lost.", "$text-warning")]
        lines += [Content.styled("  " + line, "$text-muted") for line in health.detail]
        self.update(Content("\n").join(lines))
