"""The chats laid out as tabs (one shown) or as a grid (every one shown, each titled)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import ContentSwitcher, TabbedContent

from mlxchat.app.ui.widgets.chat_pane import ChatPane


def lay_out_chats(tabs: TabbedContent, panes: Sequence[ChatPane]) -> None:
    """In the grid every chat is shown: columns for up to 3 rows, each pane titled by the app (the tabs hidden); as
    tabs, the active one."""
    grid = tabs.has_class("-grid")
    switcher = tabs.query_one(ContentSwitcher)
    switcher.styles.grid_size_columns = 1 if len(panes) == 1 else 2 if len(panes) <= 4 else 3
    # The id, not active_pane: right after a close the active id may name the pane just removed.
    active = tabs.active
    for pane in panes:
        # The switcher shows only the active pane; the grid overrides it after each switch.
        pane.display = grid or pane.id == active
        if not grid:
            pane.border_title = None
