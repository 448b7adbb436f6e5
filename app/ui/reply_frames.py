"""Streaming replies reach the screen in frames, not token by token.

The engine thread drops each reply's text into its ReplyFeed (no message per token). One clock,
ReplyFrames, then draws the new text of every streaming chat in the same frame: each redraw of a
growing reply lays out the whole screen, so eight chats redrawn together cost one layout, not eight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from textual.message_pump import MessagePump
from textual.timer import Timer

FRAME_INTERVAL_S = 1 / 30  # one streaming chat is redrawn at most this often
# With several chats streaming on screen, a frame redraws all of them and costs more: the frames
# come at most this many times a second divided by the chats shown streaming, so the UI keeps
# its share of a CPU the engine needs small.
CHAT_FRAMES_PER_S = 8


class FramedChat(Protocol):
    """What the clock needs of a chat."""

    @property
    def busy(self) -> bool: ...

    @property
    def display(self) -> bool: ...

    def draw_frame(self, shown: bool) -> None: ...


class ReplyFrames:
    """The clock that redraws every streaming chat at once; it sleeps while none streams."""

    def __init__(
        self, owner: MessagePump, chats: Callable[[], Sequence[FramedChat]], also: Callable[[], None]
    ) -> None:
        self._owner = owner
        self._chats = chats
        self._also = also  # what else a frame redraws (the status lines): one screen update for all
        self._next: Timer | None = None

    @property
    def running(self) -> bool:
        """Whether replies stream (and the frames redraw the status lines too)."""
        return self._next is not None

    def wake(self) -> None:
        """Starts the clock (a reply has started)."""
        if self._next is None:
            self._next = self._owner.set_timer(FRAME_INTERVAL_S, self._frame)

    def _frame(self) -> None:
        streaming = [chat for chat in self._chats() if chat.busy]
        if not streaming:
            self._next = None
            return
        shown = 0
        with self._owner.app.batch_update():
            for chat in streaming:
                chat.draw_frame(chat.display)
                shown += chat.display
            self._also()
        # One timer per frame, set for when the next is due: no wake-ups in between.
        self._next = self._owner.set_timer(max(FRAME_INTERVAL_S, shown / CHAT_FRAMES_PER_S), self._frame)
