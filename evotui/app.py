"""The evotui Textual app: watch a run live, review interventions, browse skills.

    EvoApp(run_dir).run()            # or: evotui open RUN_DIR

The app reads the run database and writes only operator commands. Data comes
in through `SyncMixin` (watchfiles + PRAGMA data_version, one poll at a time,
only rows newer than what it has); each poll posts `RunUpdated`, which is
folded into `RunState` here and pushed down to the screens. Tests inject a
`probe` (engine liveness, memory) and a `spawn` (resume) and pass
`watch=False`, then drive polls themselves.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Callable, Iterable

from textual.app import App, SystemCommand
from textual import work
from textual.binding import Binding
from textual.screen import ModalScreen, Screen

from backend.commands import VETOABLE
from backend.store.reader import loads
from evotui.components.key_gate import KeyGateMixin
from evotui.components.run_screen import RunScreen
from evotui.components.operator import OperatorMixin
from evotui.components.run_state import RunState
from evotui.components.heap import freeze_long_lived
from evotui.components.screens import MODES, PREBUILT, SCREEN_TITLES, prebuild, preload
from evotui.components.sync import SyncMixin
from evotui.engine_process import EngineHealth, EngineProbe, resume_engine
from evotui.messages import CommandAcknowledged, CommandSent, LabelChosen, RunUpdated, ScreensImported


SCREENS = Binding.Group("screens", compact=True)


class EvoApp(KeyGateMixin, OperatorMixin, SyncMixin, App[int]):
    """The run's dashboard, rollouts, diagnoses, interventions, harness, skills and log."""

    CSS_PATH = "app.tcss"
    TITLE = "evotui"
    MODES = MODES
    DEFAULT_MODE = "dashboard"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    BINDINGS = [
        *(Binding(str(i), f"show('{mode}')", title, tooltip=f"Show the {title} screen", group=SCREENS)
          for i, (mode, title) in enumerate(SCREEN_TITLES.items(), 1)),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("R", "resume_engine", "Resume engine", tooltip="Start the engine again on this run"),
        Binding("p", "auto_promote", "Auto-promote", show=False,
                tooltip="Turn promoting passed candidates automatically on or off (asks first)"),
        Binding("P", "toggle_pause", "Pause/resume", show=False, tooltip="Pause or resume training (asks first)"),
        Binding("S", "stop_run", "Stop run", show=False,
                tooltip="Stop the engine at its next checkpoint, state saved (asks first)"),
        Binding("f5", "refresh", "Refresh", show=False, tooltip="Read the database now"),
    ]

    def __init__(self, run_dir: Path, *, owns_engine: bool = False, watch: bool = True,
                 probe: EngineProbe | None = None, spawn: Callable[[Path], object] = resume_engine,
                 warm_start: bool = False, engine_proc: object | None = None) -> None:
        """`warm_start`: the app owns its process (`evotui open`): once the first data is shown,
        build the busiest screens in the background (components/screens.py) and keep the
        long-lived objects out of the garbage collector's full passes (components/heap.py). Off
        where many apps share one process (tests) and each would pay for both. `engine_proc`: the
        engine process this process started (a `Popen`), reaped by every poll once it exits."""
        super().__init__()
        self.warm_start = warm_start
        self.run_dir = Path(run_dir)
        self.owns_engine = owns_engine
        self.watch_files = watch
        self.probe = probe or EngineProbe()
        self.spawn = spawn
        self.state = RunState()
        self.health = EngineHealth()
        self.stop_requested = False  # on quit: a stop asked here (S, or the quit dialog) not yet applied
        self.engine_dead_on_exit = False
        self.exit_status: str | None = None  # the run's status when the app closed
        self.engine_procs: list = [engine_proc] if engine_proc is not None else []  # children to reap
        self._resume_proc = None
        self._preloaded = False
        self.prebuilt = False  # the PREBUILT screens are mounted (in the background)
        self._init_sync()
        self._init_operator()
        self._init_key_gate()

    def on_mount(self) -> None:
        if self.warm_start:
            freeze_long_lived()  # the modules and the first screen
        self.start_sync(self.watch_files)

    def on_unmount(self) -> None:
        self.close_sync()

    # ------------------------------------------------------------ data in
    def on_run_updated(self, message: RunUpdated) -> None:
        changed: set[str] = set()
        if message.delta is not None:
            self._cursor = message.delta.cursor
            changed, acked = self.state.apply(message.delta)
            for command in acked:
                self.post_message(CommandAcknowledged(command))
        if message.health != self.health:
            self.health = message.health
            changed.add("engine")
            self.refresh_bindings()
        if message.log_lines is not None:
            self._log_size, self.state.log_lines = message.log_lines
            changed.add("log")
        self._push(changed)
        if not self._preloaded and self.state.loaded:
            self._preloaded = True
            self.call_after_refresh(self._preload_screens)  # once the first data is on screen

    @work(thread=True, group="preload", exit_on_error=False)
    def _preload_screens(self) -> None:
        preload()
        if self.warm_start:
            self.post_message(ScreensImported())

    def on_screens_imported(self, _: ScreensImported) -> None:
        self._prebuild_screens()

    @work(group="prebuild", exclusive=True, exit_on_error=False)
    async def _prebuild_screens(self) -> None:
        """Build the busiest screens in the background (screens.prebuild), one at a time; a task of
        its own, so keys are answered meanwhile."""
        for mode in PREBUILT:
            await prebuild(self, mode)
        freeze_long_lived()  # the screens' modules and widgets
        self.prebuilt = True

    def _push(self, changed: set[str]) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, RunScreen):
                screen.refresh_state(changed)

    def on_command_sent(self, message: CommandSent) -> None:
        # A poll may already have read the row (even acknowledged): never put it back to pending.
        self.command_written(message.verb)
        self.state.commands.setdefault(message.cid, {"id": message.cid, "verb": message.verb, "status": "pending",
                                                     "arg_json": json.dumps(message.arg), "result": None})
        self.notify(f"{_describe(message.verb, message.arg)}: sent, waiting for the engine",
                    title=f"Command #{message.cid}")
        self._push({"commands"})
        self.request_poll()

    def on_command_acknowledged(self, message: CommandAcknowledged) -> None:
        c = message.command
        arg = loads(c.get("arg_json"), {}) or {}
        self.notify(f"{_describe(c['verb'], arg)}: {c['status']} ({c.get('result') or ''})",
                    title=f"Command #{c['id']}", severity="information" if c["status"] == "applied" else "warning")

    async def on_label_chosen(self, message: LabelChosen) -> None:
        await self.switch_mode("rollouts")
        self.screen.filter_by_label(message.label)

    # ------------------------------------------------------------ actions
    def action_show(self, mode: str) -> None:
        self.switch_mode(mode)

    def action_help(self) -> None:
        from evotui.components.help_screen import HelpScreen

        self.push_screen(HelpScreen(self.screen))

    def action_refresh(self) -> None:
        self.request_poll(force=True)

    def action_auto_promote(self) -> None:
        self.request_auto_promote()

    def action_toggle_pause(self) -> None:
        self.request_pause()

    def action_stop_run(self) -> None:
        self.request_stop()

    def action_resume_engine(self) -> None:
        if self._resuming():
            self.notify("the engine is already starting (it loads the model first)", title="Resume")
            return
        self._resume_proc = self.spawn(self.run_dir)
        self.engine_procs.append(self._resume_proc)
        self.owns_engine = True
        self.notify(f"engine starting again (pid {getattr(self._resume_proc, 'pid', '?')}); "
                    "its output goes to engine.log", title="Resume")

    def _resuming(self) -> bool:
        """A resume this app started that has not yet taken over the run (nor exited)."""
        proc = self._resume_proc
        return proc is not None and getattr(proc, "poll", lambda: None)() is None and self.health.resumable

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if isinstance(self.screen, ModalScreen) and action not in ("focus_next", "focus_previous"):
            return False  # a dialog has the keyboard: typed text never reaches the app's keys
        if action == "resume_engine":
            return self.health.resumable
        return True

    async def action_quit(self) -> None:
        status = self.state.run.get("status") if self.state.loaded else "created"  # not read yet: ask anyway
        engine_running = status in ("running", "paused", "created") and not self.health.dead
        self.exit_status = status if self.state.loaded else None
        self.stop_requested = self.asked_control() == "stopping…"  # S: asked already, nothing to ask
        if not (self.owns_engine and engine_running) or self.stop_requested:
            self.engine_dead_on_exit = self.health.dead
            self.exit(0)
            return
        from evotui.components.quit_modal import QuitModal

        self.push_screen(QuitModal(), self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice == "stop":
            self.stop_requested = True
            self._write_command("stop", {})
        if choice in ("stop", "leave"):
            self.exit(0)

    # ------------------------------------------------------------ palette
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key's action is also a palette entry (screens first, then this screen's keys)."""
        for mode, title in SCREEN_TITLES.items():
            yield SystemCommand(f"Show {title}", f"Switch to the {title} screen", partial(self.switch_mode, mode))
        seen = set()
        for binding in [*getattr(screen, "BINDINGS", []), *self.BINDINGS]:
            if not isinstance(binding, Binding) or not binding.description or binding.action.startswith("show("):
                continue
            action = binding.action.removeprefix("app.")  # a screen's key for an app action: one entry
            if action in seen or (action == "resume_engine" and not self.health.resumable):
                continue
            seen.add(action)
            namespace = screen if binding in getattr(screen, "BINDINGS", []) else self
            yield SystemCommand(binding.description, binding.tooltip or f"key: {binding.key}",
                                partial(self.run_action, binding.action, namespace))
        yield from self._decision_commands()
        yield from super().get_system_commands(screen)

    def _decision_commands(self) -> Iterable[SystemCommand]:
        """Approve and veto each waiting intervention, from any screen (the same checks as a and v)."""
        for r in self.state.interventions:
            what = f"#{r['id']}: {r.get('title') or ''}"
            if r["status"] in ("passed", "inconclusive"):
                yield SystemCommand(f"Approve {what}", f"{r['status']}; built on v{r.get('parent_version')}",
                                    partial(self.request_approve, r["id"], r["status"] == "inconclusive"))
            if r["status"] in VETOABLE:
                yield SystemCommand(f"Veto {what}", "asks for the reason", partial(self.request_veto, r["id"]))


def _describe(verb: str, arg: dict) -> str:
    if "id" in arg:
        return f"{verb} intervention {arg['id']}"
    if verb == "auto_promote":
        return f"auto-promote {'on' if arg.get('on') else 'off'}"
    if verb == "propose_edit":
        return "propose the edited harness.py"
    return verb
