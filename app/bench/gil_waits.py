"""Where the UI thread's time went while chats streamed, for `mlxchat bench --ui`, where Linux lets it be read.

A stretch of the UI thread's wall time is its own work (its CPU clock), a wait for a core (its run-queue time in
/proc/thread-self/schedstat), or else a block: in the bench, with nothing else to wait on, a wait for the GIL, held
by another thread (the engine's Python). GilWaits wakes the UI's event loop every TICK_S and keeps the longest such
wait; Split cuts one stretch (a key's latency) into the three.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

TICK_S = 0.005
SCHEDSTAT = Path("/proc/thread-self/schedstat")


@dataclass(frozen=True)
class Clocks:
    """The calling thread's clocks, in seconds."""

    wall: float
    cpu: float
    queued: float  # runnable, waiting for a core

    @staticmethod
    def read() -> Clocks | None:
        """Now; None where the run-queue time cannot be read (not Linux)."""
        try:
            queued_ns = int(SCHEDSTAT.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            return None
        return Clocks(time.perf_counter(), time.thread_time(), queued_ns / 1e9)


@dataclass(frozen=True)
class Split:
    """A stretch of the thread's wall time: its own work, waiting for a core, and the rest (blocked: the GIL)."""

    wall: float
    own: float
    core: float

    @staticmethod
    def between(before: Clocks, after: Clocks) -> Split:
        return Split(after.wall - before.wall, after.cpu - before.cpu, after.queued - before.queued)

    @property
    def blocked(self) -> float:
        return max(0.0, self.wall - self.own - self.core)

    def words(self) -> str:
        return (f"{self.wall * 1000:.0f} ms: the UI thread's own work {self.own * 1000:.0f} ms, waiting for a core "
                f"{self.core * 1000:.0f} ms, for the GIL {self.blocked * 1000:.0f} ms")


class GilWaits:
    """Watches from the UI thread's event loop between `start()` and `stop()`: `longest_s`, the longest time a wake
    was late for want of the GIL (None where it cannot be read)."""

    def __init__(self) -> None:
        self.longest_s: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if Clocks.read() is not None:
            self.longest_s = self.longest_s or 0.0
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self) -> None:
        before = Clocks.read()
        while before is not None:
            await asyncio.sleep(TICK_S)
            after = Clocks.read()
            if after is None:
                return
            late = Split.between(before, after)
            # (the sleep asked for is neither work nor a wait)
            self.longest_s = max(self.longest_s or 0.0, late.blocked - TICK_S)
            before = after
