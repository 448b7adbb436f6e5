"""Textual's Footer, made anew only when the keys it shows change, without the keys it has replaced, and showing
only the keys it has room for, whole."""

from __future__ import annotations

from typing import Hashable

from rich.cells import cell_len
from textual.widget import Widget
from textual.widgets import Footer as TextualFooter

from mlxchat.app.ui.workarounds.stale_watchers import drop_watchers


class Footer(TextualFooter):
    """Textual's Footer makes its keys anew whenever the bindings may have changed: at every change of
    focus, 15-30 ms of the UI thread for about 30 keys, mostly spent styling them, while the keys are
    usually the same (one chat's message box to another's). This one compares what it would show first.

    Each key is bound to the Footer's `compact`: without `drop_watchers`, every key it ever showed
    stayed alive (500 in a minute of typing in a grid of chats), walked by every garbage collection.

    Textual's Footer lets the keys run under the palette's key at its right edge: at 80 columns the
    chats' keys were cut mid-word ('f4 Grid  ^▏^p palette'). This one hides the keys from the first
    that would be cut (F1 and the palette list them all)."""

    _shown: Hashable = None

    async def recompose(self) -> None:
        if not self.is_attached:  # (its screen closed before a recompose it had asked for: as Textual's own returns)
            return
        shown = self._keys_to_show()
        if shown == self._shown:
            return
        self._shown = shown
        await super().recompose()
        drop_watchers(self)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

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

    def _fit(self) -> None:
        """Shows every key, then, once they are laid out, hides those from the first the edge would cut."""
        keys = [child for child in self.children if not child.has_class("-command-palette")]
        for key in keys:
            key.display = True
        self.call_after_refresh(self._hide_cut, keys)

    def _hide_cut(self, keys: list[Widget]) -> None:
        if not all(key.is_attached for key in keys):  # (made anew since: their own fit is on its way)
            return
        palette = next((child for child in self.children if child.has_class("-command-palette")), None)
        edge = palette.region.x if palette is not None else self.region.right
        cut = False
        for key in keys:  # (a key's last blank may go under the edge: its text is whole; a group of keys is whole)
            right = key.region.right if key.children else key.region.x + cell_len(str(key.render()).rstrip())
            cut = cut or right > edge
            key.display = not cut
