"""Keys reach the screen that was on top when they were typed, in the order they were typed.

Textual hands a key to the focused widget of the screen on top, and resolves
its bindings only when the key has bubbled back up to the app, against the
screen on top *then*. Typed quickly (or replayed by a terminal multiplexer),
`p Tab Enter` could open a dialog with `p` and have `Tab Enter` resolved
against it although they were sent to the screen below, and a key typed while
a dialog opens could land before its first control has the focus. The gate,
mixed into the app, keeps to two rules:

- a key is held while a dialog is on top but not yet ready (mounted, focused);
  held keys go on, in order, when it is (`DialogChanged`);
- a key that comes back up from a screen no longer on top is not resolved
  against the new one: it is handed again to the screen now on top (held
  first if that is a dialog not yet ready).

A dialog on top is handed each key here, in the app's own handler
(`_to_dialog`), rather than through its widgets' queues: a key that closes it,
or submits its field, is done before the next key is looked at.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from itertools import count

from textual import events
from textual.screen import Screen
from textual.widgets import Input

from evotui.components.dialog import Dialog
from evotui.messages import DialogChanged

TRACKED = 256  # keys in flight remembered (a key a widget consumes never comes back)


class KeyGateMixin:
    """Mixed into the app ahead of `App`: overrides `on_event` for keys only."""

    screen: Screen

    def _init_key_gate(self) -> None:
        self._key_seq = count()
        self._held: list[tuple[int, events.Key]] = []  # (order typed, key), sorted
        self._in_flight: OrderedDict[events.Key, tuple[int, Screen]] = OrderedDict()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and await self._gate(event):
            return
        await super().on_event(event)  # type: ignore[misc]

    async def on_dialog_changed(self, _: DialogChanged) -> None:
        await self._release()

    def keys_ready(self) -> bool:
        """Whether a key may be handed to the screen on top now."""
        try:
            screen = self.screen
        except Exception:  # no screen yet (the app is starting): Textual's own handling
            return True
        return not isinstance(screen, Dialog) or (screen.ready and not screen.closing)

    # ------------------------------------------------------------ the two rules
    async def _gate(self, key: events.Key) -> bool:
        """True when `key` is held or dropped here instead of handled now."""
        if not key.is_forwarded:  # from the terminal
            seq = next(self._key_seq)
            if self._held or not self.keys_ready():
                bisect.insort(self._held, (seq, key), key=lambda held: held[0])
                await self._release()
                return True
            if isinstance(self.screen, Dialog):
                await self._to_dialog(self.screen, key)
                return True
            self._track(key, seq)
            return False
        seq, origin = self._in_flight.pop(key, (None, None))
        if origin is None or origin is self.screen:
            return False
        bisect.insort(self._held, (seq, events.Key(key.key, key.character)), key=lambda held: held[0])
        await self._release()
        return True

    async def _release(self) -> None:
        """Hand held keys to the screen on top, oldest first, while it can take them."""
        while self._held and self.keys_ready():
            seq, key = self._held.pop(0)
            if isinstance(self.screen, Dialog):
                await self._to_dialog(self.screen, key)
            else:
                self._track(key, seq)
                await super().on_event(key)  # type: ignore[misc]

    async def _to_dialog(self, dialog: Dialog, key: events.Key) -> None:
        """The dialog's priority bindings, else a character for its focused field, else the focused
        control's bindings; what none of them takes, the dialog drops (`key_unused`)."""
        if await self._check_bindings(key.key, priority=True):  # type: ignore[attr-defined]
            return
        if isinstance(dialog.focused, Input) and key.is_printable and key.character:
            dialog.focused.insert_text_at_cursor(key.character)
        elif not await self._check_bindings(key.key):  # type: ignore[attr-defined]
            dialog.key_unused(key)

    def _track(self, key: events.Key, seq: int) -> None:
        self._in_flight[key] = (seq, self.screen)
        while len(self._in_flight) > TRACKED:
            self._in_flight.popitem(last=False)
