"""The aggregate generation rate both engines report: tokens over the last seconds, thread-safe."""

from __future__ import annotations

import collections
import threading
import time

RATE_WINDOW_S = 2.0  # aggregate tok/s is measured over the last events in this window


def stream_rate(count: int, t_first: float | None, t_last: float | None) -> float:
    """A stream's rate: the `count - 1` items after its first, over the time from the first to the last
    (0 until there are two)."""
    if t_first is None or t_last is None or count < 2:
        return 0.0
    return (count - 1) / max(t_last - t_first, 1e-9)


class RateMeter:
    """Counts tokens as they come (from any thread) and gives tok/s over the last RATE_WINDOW_S seconds."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = threading.Lock()

    def record(self, tokens: int) -> None:
        """`tokens` came out now (a decode pass's rows, a streamed chunk)."""
        now = time.perf_counter()
        with self._lock:
            self._recent.append((now, tokens))
            self._forget(now)

    def tok_s(self) -> float:
        """Tokens per second between the first and the last event still in the window (0 with fewer than two)."""
        with self._lock:
            self._forget(time.perf_counter())
            recent = list(self._recent)
        if len(recent) < 2:
            return 0.0
        return sum(n for _, n in recent[1:]) / max(recent[-1][0] - recent[0][0], 1e-9)

    def _forget(self, now: float) -> None:
        while self._recent and now - self._recent[0][0] > self.window_s:
            self._recent.popleft()


class PassMeter(RateMeter):
    """The rate of a scheduler's decode passes, and the most slots one pass has carried (batching at work)."""

    def __init__(self) -> None:
        super().__init__()
        self.widest = 0

    def passed(self, rows: int, tokens: int | None = None) -> None:
        """A decode pass gave `rows` slots a token each (`tokens` in all where it checked drafts)."""
        self.record(rows if tokens is None else tokens)
        self.widest = max(self.widest, rows)
