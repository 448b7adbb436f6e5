"""Textual's Footer, without the keys it has replaced."""

from __future__ import annotations

from textual.widgets import Footer as TextualFooter

from mlxchat.app.ui.watchers import drop_watchers


class Footer(TextualFooter):
    """The Footer makes its keys anew whenever the bindings change (at every change of focus), each
    key bound to the Footer's `compact`: without this, every key it ever showed stayed alive (500 in
    a minute of typing in a grid of chats), walked by every garbage collection."""

    async def recompose(self) -> None:
        await super().recompose()
        drop_watchers(self)
