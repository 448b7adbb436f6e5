"""Holds Python's full garbage collections off while replies stream, and runs the one owed when the
screen has shown them all ended.

A full collection walks every tracked object and stalls every thread while it does: with eight chats
streaming, one took up to 121 ms of CPU (after gc.freeze at start-up), and a key pressed meanwhile
waited for it. Young collections, which are short, keep running; the cyclic garbage that would have
waited for a full collection is collected once no reply streams or waits to be shown ended (a
collection as the engine finished eight replies took 120-160 ms while their endings were drawn).
"""

from __future__ import annotations

import gc

# Full collections come after this many young (generation 1) collections: far more than a reply
# streams, so none starts while one does.
HELD_THRESHOLD = 1_000_000


class FullCollections:
    """`streaming(True)` holds full collections off; `streaming(False)` lets them run again and collects."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None

    def streaming(self, busy: bool) -> None:
        if busy and self._saved is None:
            self._saved = gc.get_threshold()
            first, second, _ = self._saved
            gc.set_threshold(first, second, HELD_THRESHOLD)
        elif not busy and self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
            gc.collect()
