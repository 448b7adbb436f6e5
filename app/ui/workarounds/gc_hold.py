"""Holds Python's full garbage collections off while replies stream, and runs the one owed once the
screen has shown them all ended and a moment has passed.

A full collection walks every tracked object and stalls every thread while it does: with eight chats
streaming, one took up to 121 ms of CPU (after gc.freeze at start-up), and a key pressed meanwhile
waited for it. Young collections, which are short, keep running; the cyclic garbage that would have
waited for a full collection is collected once no reply streams or waits to be shown ended, a moment
later (COLLECT_AFTER_S): run at once, it took 60-210 ms just as the last reply was shown ended, when
the user starts to type again.
"""

from __future__ import annotations

import gc

WORKS_AROUND = "Textual 8: a full collection (CPython 3.11's) walks every widget, stalling the UI thread"

# Full collections come after this many young (generation 1) collections: far more than a reply
# streams, so none starts while one does.
HELD_THRESHOLD = 1_000_000


# How long after the last reply was shown ended the owed full collection runs (if none streams again).
COLLECT_AFTER_S = 1.5


class FullCollections:
    """`hold()` holds full collections off; `release()` lets them run again and runs the one owed."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None

    def hold(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
            first, second, _ = self._saved
            gc.set_threshold(first, second, HELD_THRESHOLD)

    def release(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
            gc.collect()
