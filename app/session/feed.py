"""The text of a streaming reply, handed from the engine thread to the UI without a message per token."""

from __future__ import annotations

from collections import deque


class ReplyFeed:
    """The text of one reply, handed from the engine thread to the UI (thread-safe)."""

    def __init__(self) -> None:
        self._parts: deque[str] = deque()  # append and popleft are atomic: no lock is needed

    def put(self, text: str) -> None:
        """Adds text the engine wrote (engine thread)."""
        self._parts.append(text)

    def take(self) -> str:
        """All the text put since the last take (UI thread)."""
        parts = []
        while self._parts:
            parts.append(self._parts.popleft())
        return "".join(parts)
