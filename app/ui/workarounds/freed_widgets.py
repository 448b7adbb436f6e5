"""Textual's TextArea and Input, freed when they are removed."""

from __future__ import annotations

from textual.widgets import Input as TextualInput
from textual.widgets import TextArea as TextualTextArea

from mlxchat.app.ui.workarounds.stale_watchers import drop_watchers

WORKS_AROUND = "Textual 8: a removed TextArea or Input keeps its theme watcher and its screen's selection signal"


class FreedOnUnmount:
    """Lets go of the app and the screen when removed.

    Textual's TextArea watches the app's theme, and it and Input subscribe to their screen's
    text-selection signal, and keep both when they are removed: the subscription lives as long as the
    screen (its callback holds the widget that is the subscription's weak key). On the main screen that
    is for good: every closed chat's message box and file filter stayed, with whatever they held (a
    closed chat's widgets and rendered lines, until its box was freed), and every full garbage
    collection walked them.
    """

    def on_unmount(self: TextualTextArea | TextualInput) -> None:
        drop_watchers(self.app, of=self)
        self.screen.text_selection_started_signal.unsubscribe(self)


class FreedTextArea(FreedOnUnmount, TextualTextArea):
    """A TextArea that lets go of the app and its screen when removed."""


class FreedInput(FreedOnUnmount, TextualInput):
    """An Input that lets go of its screen when removed."""
