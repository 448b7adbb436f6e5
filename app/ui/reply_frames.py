"""Streaming replies reach the screen in frames, not token by token.

The engine thread drops each reply's text into its ReplyFeed (no message per token). One clock,
ReplyFrames, takes every streaming chat's new text each frame and repaints every one that is shown,
with its status line, in one screen update. What a screen update costs is mostly what it costs
whatever it moves: a scroll or a layout walks every widget on the screen (4-8 ms with eight chats in
the grid, taken from the engine's cores), while a reply's new lines repaint in under a millisecond;
eight chats scrolled in one update took 11.5 ms, one alone 8. So the grid's chats share their frames: one update
a frame scrolls or lays out all of them at once, instead of one chat per frame in turn. Turns that
start or end together (a fan-out sends several messages at once, a grid of chats often ends together)
are likewise shown together: a few per screen update while the engine writes, all in one once it is idle.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from textual.message_pump import MessagePump
from textual.timer import Timer

from mlxchat.app.ui.workarounds.gc_hold import COLLECT_AFTER_S, FullCollections

# Frames a second: one chat shown streaming is repainted 8 times a second; several (the grid) twice each,
# in one update a frame (a frame that repaints eight chats costs about what three frames of one did).
ONE_CHAT_FRAMES_PER_S = 8
GRID_FRAMES_PER_S = 2
FIRST_FRAME_S = 1 / 30  # a reply's first words show at once, not a frame later
# Changes of turns (a message sent, a reply ended) shown in one screen update while the engine writes; the next ones
# follow once the screen has shown them, keys read between. Each lays out the screen and repaints its pane: eight
# in one update took 42 ms of CPU (60-70 under the engine's load) and kept a key waiting 72 ms; two, 21-30 ms a screen
# update, and every key of `bench --ui --slots 8` slower than 25 ms (AVX2 forced, 28-48 ms) had come during one; one,
# keys p95 16-27 ms, worst 23-40 (six runs). Once no reply is being written the engine leaves the CPU to the UI, and the
# replies still to be shown ended go in one update, keys read between them (four an update, the last of 8 chats ending
# together showed 90-96 ms after the engine's end; all in one, 65-87 ms, keys under 45 ms).
CHANGES_PER_UPDATE = 1


class FramedChat(Protocol):
    """What the clock needs of a chat."""

    @property
    def busy(self) -> bool: ...

    @property
    def display(self) -> bool: ...

    @property
    def awaiting_words(self) -> bool: ...

    def draw_frame(self, repaint: bool) -> None: ...


F = TypeVar("F", bound=FramedChat)


class ReplyFrames(Generic[F]):
    """The clock that redraws the streaming chats and shows replies ended; it sleeps while none streams."""

    def __init__(
        self, owner: MessagePump, chats: Callable[[], Sequence[F]], also: Callable[[Sequence[F]], None],
        writing: Callable[[], bool],
    ) -> None:
        """`writing()`: whether the engine is writing any reply now."""
        self._owner = owner
        self._writing = writing
        self._chats = chats
        # What else a frame redraws of the chats it repaints (their status lines), and a change of the chats it changed
        # (their labels and status lines, once idle).
        self._also = also
        self._next: Timer | None = None
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
        with self._owner.app.batch_update():
            for chat in streaming:
                chat.draw_frame(chat.display)
            self._also(shown)
        # One timer per frame, set for when the next is due: no wake-ups in between. A reply's first words show
        # a short frame after they come, not a grid's frame later.
        fast = len(shown) <= 1 or any(chat.awaiting_words for chat in shown)
        rate = ONE_CHAT_FRAMES_PER_S if fast else GRID_FRAMES_PER_S
        self._next = self._owner.set_timer(1 / rate, self._frame)

    def change(self, change: Callable[[], Awaitable[None]]) -> None:
        """Changes the turns shown (mounts a sent message, shows a reply ended) by calling `change`: at once,
        or with the changes asked with it, once the screen has shown those asked before; in the order asked."""
        self._changes.append(change)
        if not self._changing:
            self._changing = True
            self._owner.call_later(self._change_next)

    async def _change_next(self) -> None:
        idle = not self._writing()
        try:
            with self._owner.app.batch_update():  # (one screen update shows them all, and the labels they change)
                for number in range(len(self._changes) if idle else min(CHANGES_PER_UPDATE, len(self._changes))):
                    if number:
                        await asyncio.sleep(0)  # (a key pressed meanwhile is read now, and shown with them)
                    await self._changes.popleft()()
                self._also(())
        finally:  # (a change that failed must not hold up the others)
            if self._changes:
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
