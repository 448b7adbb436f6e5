"""Textual's TextArea, freed when it is removed."""

from __future__ import annotations

from textual.widgets import TextArea as TextualTextArea

from mlxchat.app.ui.stale_watchers import drop_watchers


class FreedTextArea(TextualTextArea):
    """A TextArea that lets go of the app and its screen when removed.

    Textual's TextArea watches the app's theme and subscribes to its screen's text-selection signal,
    and keeps both when it is removed: the subscription lives as long as the screen (its callback
    holds the widget that is the subscription's weak key). Until then the app held every removed
    TextArea and whatever held it: a closed chat (its widgets, its rendered lines) was never freed,
    and every full garbage collection walked all the chats closed so far.
    """

    def on_unmount(self) -> None:
        drop_watchers(self.app, of=self)
        self.screen.text_selection_started_signal.unsubscribe(self)
