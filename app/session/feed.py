"""The text of a streaming reply, handed from the engine thread to the UI without a message per token."""

from __future__ import annotations

from collections import deque

from mlxchat.engine import Part


class ReplyFeed:
    """The text of one reply, part by part (reasoning, answer), handed from the engine thread to the UI
    (thread-safe)."""

    def __init__(self) -> None:
        self._parts: deque[tuple[Part, str, int]] = deque()  # append and popleft are atomic: no lock is needed

    def put(self, part: Part, text: str, tokens: int) -> None:
        """Adds text the engine wrote, and the tokens it covers (engine thread)."""
        self._parts.append((part, text, tokens))

    def take(self) -> list[tuple[Part, str, int]]:
        """All the text put since the last take, each run of one part joined (UI thread)."""
        runs: list[tuple[Part, str, int]] = []
        while self._parts:
            part, text, tokens = self._parts.popleft()
            if runs and runs[-1][0] == part:
                runs[-1] = (part, runs[-1][1] + text, runs[-1][2] + tokens)
            else:
                runs.append((part, text, tokens))
        return runs
