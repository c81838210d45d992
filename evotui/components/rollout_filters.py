"""The rollouts filter bar: domain, label, verdict, harness version, reward range, text."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Select

from backend.store.reader import FilterChoices, RolloutFilter

SEARCH_DEBOUNCE_S = 0.4
BUILD_LATEST_S = 0.5


def parse_range(text: str) -> tuple[float | None, float | None]:
    """'0.5..1' -> (0.5, 1); '>0.5' -> (0.5, None); '<0.2' -> (None, 0.2); '1' -> (1, 1).

    >>> parse_range("..0.3")
    (None, 0.3)
    """
    t = text.strip().replace(" ", "")
    if not t:
        return None, None
    num = lambda s: float(s) if s else None  # noqa: E731
    if ".." in t:
        lo, hi = t.split("..", 1)
        return num(lo), num(hi)
    if t[0] in "<>":
        value = float(t.lstrip("<>="))
        return (value, None) if t[0] == ">" else (None, value)
    return float(t), float(t)


class RolloutFilterBar(Horizontal):
    """Posts `RolloutFilterBar.Changed` whenever the filter it shows changes."""

    DEFAULT_CSS = """
    RolloutFilterBar { height: 1; }
    RolloutFilterBar Select { width: 11; margin-right: 1; }
    RolloutFilterBar #f-label { width: 18; }
    RolloutFilterBar #f-version { width: 8; }
    RolloutFilterBar #f-reward { width: 11; margin-right: 1; }
    RolloutFilterBar #f-text { width: 1fr; }
    RolloutFilterBar Input.-invalid { color: $text-error; }
    """

    class Changed(Message):
        def __init__(self, flt: RolloutFilter) -> None:
            super().__init__()
            self.flt = flt

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.flt = RolloutFilter()
        self._timer = None
        self.built = False
        self._building = False
        self._pending: list = []  # calls that arrived before the controls were built
        self._choices: FilterChoices | None = None  # what the selects offer now

    def on_mount(self) -> None:
        # The controls (four Selects with their option lists) cost about a third of the screen's
        # first frame: the screen builds them once its first page is painted (`build`), or
        # after BUILD_LATEST_S whatever happens.
        self.set_timer(BUILD_LATEST_S, self.build)

    def build(self) -> None:
        """Mount the controls (once), after the next refresh."""
        if not self.built and not self._building:
            self._building = True
            self.call_after_refresh(self._build)

    async def _build(self) -> None:
        await self.mount_all(self._controls())
        self.built = True
        for call, args in self._pending:
            call(*args)
        self._pending.clear()

    def _when_built(self, call, *args) -> bool:
        """Run `call(*args)` now if the controls exist, else once they do; True when it ran now."""
        if self.built:
            return True
        self._pending.append((call, args))
        return False

    @staticmethod
    def _controls() -> ComposeResult:
        yield Select([], prompt="domain", id="f-domain", compact=True)
        yield Select([], prompt="label", id="f-label", compact=True)
        yield Select([], prompt="verdict", id="f-verdict", compact=True)
        yield Select([], prompt="H ver", id="f-version", compact=True)
        yield Input(placeholder="reward a..b", id="f-reward", compact=True)
        yield Input(placeholder="/ search words in prompts, completions, tasks (need* for a prefix)", id="f-text",
                    compact=True)

    def focus_control(self, selector: str) -> None:
        """Focus one control (`#f-text`, `#f-domain`), now or as soon as it exists."""
        if self._when_built(self.focus_control, selector):
            self.query_one(selector).focus()

    def set_choices(self, choices: FilterChoices) -> None:
        if not self._when_built(self.set_choices, choices) or choices == self._choices:
            return  # the same lists again (every visit asks): the selects are left as they are
        self._choices = choices
        self._options("#f-domain", [(d, d) for d in choices.domains])
        self._options("#f-label", [(lbl, lbl) for lbl in choices.labels])
        self._options("#f-verdict", [(v, v) for v in choices.verdicts])
        self._options("#f-version", [(f"v{v}", v) for v in choices.harness_versions])

    def _options(self, selector: str, options: list[tuple]) -> None:
        select = self.query_one(selector, Select)
        value = select.value
        if value != Select.NULL and value not in [v for _, v in options]:
            options.append((str(value), value))
        with select.prevent(Select.Changed):
            select.set_options(options)
            select.value = value

    def set_label(self, label: str) -> None:
        """Show only rollouts with `label` (from the Diagnoses screen)."""
        if not self._when_built(self.set_label, label):
            return
        select = self.query_one("#f-label", Select)
        if label not in [v for _, v in select._options]:
            self._options("#f-label", [*[o for o in select._options if o[1] != Select.NULL], (label, label)])
        select.value = label

    def clear(self) -> None:
        if not self._when_built(self.clear):
            return
        for select in self.query(Select):
            with select.prevent(Select.Changed):
                select.clear()
        for inp in self.query(Input):
            with inp.prevent(Input.Changed):
                inp.value = ""
            inp.remove_class("-invalid")
        self._emit()

    @on(Select.Changed)
    @on(Input.Submitted)
    def _emit(self) -> None:
        flt = self._read()
        if flt is not None and flt != self.flt:
            self.flt = flt
            self.post_message(self.Changed(flt))

    @on(Input.Changed, "#f-text")
    def _typed(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(SEARCH_DEBOUNCE_S, self._emit)

    def _read(self) -> RolloutFilter | None:
        reward = self.query_one("#f-reward", Input)
        try:
            lo, hi = parse_range(reward.value)
            reward.remove_class("-invalid")
        except ValueError:
            reward.add_class("-invalid")
            self.notify("reward range: use a..b, >a, <b or a number", severity="warning")
            return None
        return RolloutFilter(domain=self._value("#f-domain"), label=self._value("#f-label"),
                             verdict=self._value("#f-verdict"), harness_version=self._value("#f-version"),
                             reward_min=lo, reward_max=hi, text=self.query_one("#f-text", Input).value.strip())

    def _value(self, selector: str):
        value = self.query_one(selector, Select).value
        return None if value == Select.NULL else value
