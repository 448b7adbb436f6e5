"""Runs the engine's CPU work below the priority of the thread that draws the UI (Linux).

On a CPU the engine keeps every core busy: its own thread, MLX's stream threads and the BLAS's
workers. The kernel shares the cores evenly between them and the UI thread, so a key press waits
its turn behind a matmul (up to 141 ms while eight chats decoded, `mlxchat bench --ui`). Run at a
higher nice value, the engine's threads give way as soon as the UI thread wakes and lose nothing
while it sleeps. Linux sets a nice value per thread, and a thread starts with its creator's.
"""

from __future__ import annotations

import os
import sys
import threading


def thread_ids() -> set[int]:
    """The kernel's ids of this process's threads (empty where /proc does not list them)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def run_below_ui(nice: int, workers: tuple[int, ...]) -> None:
    """Gives the calling thread, every thread it starts from now on, and the `workers` threads
    (the BLAS's own, which its creator's nice value does not reach) the nice value `nice`.

    Call it on the engine's thread before its first MLX call, so that MLX's stream threads start
    from it. Does nothing for `nice` 0, off Linux, or where a thread is already lower.
    """
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    for tid in (threading.get_native_id(), *workers):
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:
            pass  # a worker that has ended since it was counted
