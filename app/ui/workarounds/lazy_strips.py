"""Strips that make their caches when one is first used, not each time a strip is made.

A screen update makes a strip for every line of every widget it draws, and Textual's Strip makes seven small caches
in each as it is made (its crops, divisions, styles ...), whether or not it is ever cut or styled: with eight chats in
the grid, 92,540 strips in 101 slow layouts, and making them a sixth of those layouts' time (Strip.__init__ and
FIFOCache.__init__: 0.84 of 4.9 s of CPU). `install` has a strip make each cache on its first use (Textual's Content
does so already): the layouts of `bench --ui --slots 8`'s rounds took 10 % less of the UI thread (268 against 304 ms
a round, two runs each in turn, AVX2 forced, 2 cores of an AMD EPYC). Only for the Textual it was checked on.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from typing import Any

from rich.segment import Segment
from textual.cache import FIFOCache
from textual.strip import Strip

CHECKED_ON = "8."
WORKS_AROUND = "Textual 8: every Strip makes its seven caches as it is made, used or not"
TEXTUAL_OWN = Strip.__init__
# Each cache and its size, as Strip.__init__ makes them (tests/ui/test_workarounds.py compares).
SIZES = {"_divide_cache": 4, "_crop_cache": 16, "_style_cache": 16, "_filter_cache": 4, "_line_length_cache": 4,
         "_crop_extend_cache": 4, "_offsets_cache": 4}


def install() -> bool:
    """Makes strips make their caches on first use, where Textual is a version it was checked on."""
    if not importlib.metadata.version("textual").startswith(CHECKED_ON):
        return False
    Strip.__init__ = _made  # type: ignore[method-assign]
    Strip.__getattr__ = _first_use  # type: ignore[attr-defined]
    return True


def _made(self: Strip, segments: Iterable[Segment], cell_length: int | None = None) -> None:
    """Strip.__init__ but for the caches."""
    self._segments = list(segments)
    self._cell_length = cell_length
    self._render_cache = None
    self._link_ids = None
    self._cell_count = None


def _first_use(self: Strip, name: str) -> Any:
    """A cache not made yet (Python asks once its slot is found empty): made now, as Strip.__init__ makes it."""
    size = SIZES.get(name)
    if size is None:
        raise AttributeError(name)
    cache: FIFOCache[Any, Any] = FIFOCache(size)
    setattr(self, name, cache)
    return cache
