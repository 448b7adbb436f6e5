"""Textual's Footer, made anew only when the keys it shows change, and without the keys it has replaced."""

from __future__ import annotations

from typing import Hashable

from textual.widgets import Footer as TextualFooter

from mlxchat.app.ui.workarounds.stale_watchers import drop_watchers


class Footer(TextualFooter):
    """Textual's Footer makes its keys anew whenever the bindings may have changed: at every change of
    focus, 15-30 ms of the UI thread for about 30 keys, mostly spent styling them, while the keys are
    usually the same (one chat's message box to another's). This one compares what it would show first.

    Each key is bound to the Footer's `compact`: without `drop_watchers`, every key it ever showed
    stayed alive (500 in a minute of typing in a grid of chats), walked by every garbage collection."""

    _shown: Hashable = None

    async def recompose(self) -> None:
        shown = self._keys_to_show()
        if shown == self._shown:
            return
        self._shown = shown
        await super().recompose()
        drop_watchers(self)

    def _keys_to_show(self) -> Hashable:
        """Everything `compose` reads: each binding (its key, how the key reads, description, action,
        group, tooltip, show, whether it is enabled) and whether the command palette's key is shown."""
        if not self._bindings_ready:
            return None
        bindings = tuple(
            (binding, self.app.get_key_display(binding), enabled, tooltip)
            for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
        )
        return bindings, self.show_command_palette, self.app.ENABLE_COMMAND_PALETTE
