"""bench --ui's reading of where the UI thread's time went: a wait for the GIL held by another thread is told apart
from the thread's own work (Linux: the run-queue clock in /proc)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from mlxchat.app.bench.gil_waits import Clocks, GilWaits, Split

pytestmark = pytest.mark.skipif(Clocks.read() is None, reason="the thread's run-queue clock is Linux's")

HELD_S = 0.1  # how long another thread keeps the GIL at a time


def _spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def test_a_wait_for_the_gil_held_by_another_thread_is_measured_as_such() -> None:
    async def watch() -> float | None:
        waits = GilWaits()
        waits.start()
        await asyncio.sleep(0.02)  # (the watcher's first wake, before the other thread takes the GIL)
        other = threading.Thread(target=_spin, args=(3 * HELD_S,))
        other.start()
        while other.is_alive():
            await asyncio.sleep(0.01)
        await waits.stop()
        return waits.longest_s

    saved = sys.getswitchinterval()
    sys.setswitchinterval(HELD_S)  # the spinning thread keeps the GIL this long before handing it over
    try:
        longest = asyncio.run(watch())
    finally:
        sys.setswitchinterval(saved)
    assert longest is not None and longest > HELD_S / 2


def test_a_threads_own_work_is_not_counted_as_a_wait() -> None:
    before = Clocks.read()
    until = time.thread_time() + 0.05  # (this thread's own work, however long the machine makes it take)
    while time.thread_time() < until:
        pass
    split = Split.between(before, Clocks.read())
    assert split.own >= 0.05 and split.blocked < split.own
    assert "the UI thread's own work" in split.words()


def test_no_wait_is_seen_when_no_other_thread_holds_the_gil() -> None:
    async def watch() -> float | None:
        waits = GilWaits()
        waits.start()
        await asyncio.sleep(0.2)
        await waits.stop()
        return waits.longest_s

    longest = asyncio.run(watch())
    assert longest is not None and longest < HELD_S / 2
