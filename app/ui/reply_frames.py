"""Streaming replies reach the screen in frames, not token by token.

The engine thread drops each reply's text into its ReplyFeed (no message per token). One clock,
ReplyFrames, takes every streaming chat's new text each frame but repaints one shown chat per frame,
in turn, with its status line: the screen update after a frame then renders one pane, not the whole
grid (the screen renders the rows that span every region changed: status lines all over the grid
took as long as the grid). Rendering is the
cost (8 panes repainted at once took 150-200 ms of CPU, and no key is read meanwhile); one pane at a
time keeps each update short, and each chat is still repainted as often. Turns that start or end
together (a fan-out sends several messages at once, a grid of chats often ends together) are likewise
mounted one after another, a moment apart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from textual.message_pump import MessagePump
from textual.timer import Timer

from mlxchat.app.ui.gc_hold import COLLECT_AFTER_S, FullCollections

# Frames a second, each repainting one shown chat: 8 chats in the grid are each repainted once a
# second, one chat alone 8 times; the UI keeps its share of a CPU the engine needs small.
CHAT_FRAMES_PER_S = 8
FIRST_FRAME_S = 1 / 30  # a reply's first words show at once, not a frame later
# Between two changes of turns (a message sent, a reply ended), from when the screen has shown the
# first: each lays out the screen and repaints its pane (25-45 ms of CPU, 40-80 ms while the engine
# keeps both cores busy); eight at once, or 1/30 s apart, kept a key waiting 90-150 ms. Once no reply is being
# written the engine leaves the CPU to the UI: the replies still to be shown ended follow one another at once
# (each its own change, keys read between them), not a tenth of a second apart: the last of 8 chats ending
# together showed 0.73 s after the engine's end, which cost the bench --ui's end-to-end ratio 0.1.
CHANGE_INTERVAL_S = 1 / 10


class FramedChat(Protocol):
    """What the clock needs of a chat."""

    @property
    def busy(self) -> bool: ...

    @property
    def display(self) -> bool: ...

    def draw_frame(self, repaint: bool) -> None: ...


F = TypeVar("F", bound=FramedChat)


class ReplyFrames(Generic[F]):
    """The clock that redraws the streaming chats and shows replies ended; it sleeps while none streams."""

    def __init__(
        self, owner: MessagePump, chats: Callable[[], Sequence[F]], also: Callable[[F], None],
        writing: Callable[[], bool],
    ) -> None:
        """`writing()`: whether the engine is writing any reply now."""
        self._owner = owner
        self._writing = writing
        self._chats = chats
        self._also = also  # what else a frame redraws of the chat it repaints (its status line)
        self._next: Timer | None = None
        self._turn = 0  # counts frames: whose turn it is to be repainted among the chats shown
        self._changes: deque[Callable[[], Awaitable[None]]] = deque()
        self._changing = False  # whether a change is being shown or waits for its moment
        self._collections = FullCollections()

    @property
    def running(self) -> bool:
        """Whether replies stream (and the frames redraw the status lines too)."""
        return self._next is not None

    def wake(self) -> None:
        """Starts the clock (a reply has started)."""
        self._collections.hold()
        if self._next is None:
            self._next = self._owner.set_timer(FIRST_FRAME_S, self._frame)

    def _frame(self) -> None:
        streaming = [chat for chat in self._chats() if chat.busy]
        if not streaming:
            self._next = None
            self._settle()
            return
        shown = [chat for chat in streaming if chat.display]
        turn, self._turn = self._turn % max(1, len(shown)), self._turn + 1
        painted = shown[turn] if shown else None
        with self._owner.app.batch_update():
            for chat in streaming:
                chat.draw_frame(chat is painted)
            if painted is not None:
                self._also(painted)
        # One timer per frame, set for when the next is due: no wake-ups in between.
        self._next = self._owner.set_timer(1 / CHAT_FRAMES_PER_S, self._frame)

    def change(self, change: Callable[[], Awaitable[None]]) -> None:
        """Changes the turns shown (mounts a sent message, shows a reply ended) by calling `change`: at
        once, or CHANGE_INTERVAL_S after the one before; in the order asked."""
        self._changes.append(change)
        if not self._changing:
            self._changing = True
            self._owner.call_later(self._change_next)

    async def _change_next(self) -> None:
        try:
            await self._changes.popleft()()
        finally:  # (a change that failed must not hold up the others)
            if self._changes:  # (the interval counts from when the screen has shown this change)
                if self._writing():
                    self._owner.call_after_refresh(self._owner.set_timer, CHANGE_INTERVAL_S, self._change_next)
                else:
                    self._owner.call_after_refresh(self._change_next)
            else:
                self._changing = False
                self._settle()

    def _settle(self) -> None:
        """Lets full collections run again (and runs the one owed) a moment after no reply streams or
        waits to be shown ended."""
        if self._idle:
            self._owner.set_timer(COLLECT_AFTER_S, self._collect)

    @property
    def _idle(self) -> bool:
        return self._next is None and not self._changing

    def _collect(self) -> None:
        if self._idle:  # (else a reply streams again: its own end will settle)
            self._collections.release()

    def stop(self) -> None:
        """Lets full collections run again (the app is closing)."""
        self._collections.release()
