"""The turns of a conversation are laid out and drawn once per change, not twice.

Textual declares a widget's `virtual_size` a layout reactive: a layout that changes it asks for another
layout of the whole screen. With eight chats in the grid that second layout cost 8-12 ms of the UI
thread after every turn mounted or ended, and moved nothing: a turn's height comes from its content
(get_content_height, in the layout that changed it), and a conversation's from its pane. Nor does it
need a repaint of its own (a second screen update, 6 ms): the layout that changed it has drawn it, its
virtual size being part of its place on the screen. Where a conversation's scrollbar comes or goes,
Textual asks for the layout that needs on its own.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import Static

WORKS_AROUND = "Textual 8: a change of virtual_size (a layout reactive) asks for a second layout of the screen"


def quiet_virtual_size() -> Reactive[Size]:
    """A `virtual_size` whose change asks for no layout or repaint beyond the layout that changed it."""
    return Reactive(Size(0, 0), layout=False, repaint=False)


class TurnText(Static):
    """A line or box of plain text among the turns: a user's message, a note on how a reply ended."""

    virtual_size = quiet_virtual_size()
