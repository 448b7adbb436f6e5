"""The chats laid out as tabs (one shown) or as a grid (every one shown, each titled), and where each chat's
name shows: in its tab, or in the grid as the title of its box."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.css.query import NoMatches
from textual.widgets import ContentSwitcher, TabbedContent

from mlxchat.app.ui.widgets.chat_pane import ChatPane


def lay_out_chats(tabs: TabbedContent, panes: Sequence[ChatPane]) -> None:
    """In the grid every chat is shown: columns for up to 3 rows (each pane titled by ChatLabels, the tabs hidden);
    as tabs, the active one."""
    grid = tabs.has_class("-grid")
    switcher = tabs.query_one(ContentSwitcher)
    switcher.styles.grid_size_columns = 1 if len(panes) == 1 else 2 if len(panes) <= 4 else 3
    # The id, not active_pane: right after a close the active id may name the pane just removed.
    active = tabs.active
    for pane in panes:
        # The switcher shows only the active pane; the grid overrides it after each switch.
        pane.display = grid or pane.id == active


class ChatLabels:
    """Each chat's name where it shows: in its tab, after a badge for a reply queued (◷), being written (●) or
    unseen (✓); in the grid (where each chat shows its own, the tabs hidden) as the title of its box, whose
    status line says what it does."""

    def __init__(self, tabs: Callable[[], TabbedContent], badge: Callable[[ChatPane], str]) -> None:
        self._tabs, self._badge = tabs, badge
        self._tab_labels: dict[str, str] = {}  # each tab's label as last set
        self._box_labels: dict[str, str] = {}  # in the grid, each chat's box title as last set
        self.grid = False  # every chat side by side (the tabs hidden), or one at a time

    def show(self, pane: ChatPane) -> None:
        """Names `pane` where it shows, if its name there changed (a new one repaints its box, or lays the tab
        bar out again)."""
        if self.grid:
            shown, label = self._box_labels, pane.shown_title
        else:
            badge = self._badge(pane)
            shown, label = self._tab_labels, f"{badge} {pane.shown_title}" if badge else pane.shown_title
        if shown.get(pane.chat_id) == label:
            return
        if self.grid:
            pane.retitle(label)
        else:
            try:
                tab = self._tabs().get_tab(pane.id or "")
            except NoMatches:  # its tab is going: the pane is being closed
                return
            tab.label = label
        shown[pane.chat_id] = label

    def laid_out(self, panes: Sequence[ChatPane]) -> None:
        """The chats were laid out again: each named where it shows now (as tabs, the boxes lose their titles)."""
        for pane in panes:
            if not self.grid and self._box_labels.pop(pane.chat_id, None) is not None:
                pane.retitle(None)
            self.show(pane)

    def forget(self, pane: ChatPane) -> None:
        """`pane` is being closed."""
        self._tab_labels.pop(pane.chat_id, None)
        self._box_labels.pop(pane.chat_id, None)
