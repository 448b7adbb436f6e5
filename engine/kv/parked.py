"""Parked KV: the cached state of conversations that lost their slot, kept by token history within a byte budget."""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass
from typing import Any

from mlx_lm.utils import common_prefix_len

from mlxchat.engine.memory import format_bytes

# How many dropped histories are remembered, to tell a returning chat why it is prefilled again.
DROPPED_MEMORY = 64


@dataclass
class ParkedEntry:
    """One parked conversation: its token history, every layer's saved state for it, and its size."""

    tokens: list[int]
    state: list[Any]
    nbytes: int
    label: str | None


@dataclass(frozen=True)
class Dropped:
    """A history whose state is not kept, and why (said to the chat when it comes back)."""

    tokens: list[int]
    why: str


class ParkedStore:
    """Parked entries in least-recently-used order; past `budget` bytes the oldest are evicted.

    Everything here runs on the engine thread: the states are MLX arrays, copied out of the slot
    stores when parked and copied back when a chat returns.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: collections.OrderedDict[int, ParkedEntry] = collections.OrderedDict()
        self.dropped: collections.deque[Dropped] = collections.deque(maxlen=DROPPED_MEMORY)
        self._keys = itertools.count(1)

    @property
    def used(self) -> int:
        """Bytes the parked states hold."""
        return sum(e.nbytes for e in self.entries.values())

    def would_keep(self, nbytes: int) -> str | None:
        """None if a state of `nbytes` can be parked, else why not."""
        if self.budget <= 0:
            return "parking is off (park_budget_mb = 0)"
        if nbytes > self.budget:
            return f"its KV ({format_bytes(nbytes)}) is larger than the parked store's budget ({format_bytes(self.budget)})"
        return None

    def put(self, entry: ParkedEntry) -> None:
        """Parks `entry` (newest); entries it extends go (it holds all they did), then the oldest past the budget."""
        for key, old in list(self.entries.items()):
            if common_prefix_len(old.tokens, entry.tokens) == len(old.tokens):
                del self.entries[key]
        self._forget_dropped(entry.tokens)
        self.entries[next(self._keys)] = entry
        while self.used > self.budget:
            _, oldest = self.entries.popitem(last=False)
            self.drop(oldest.tokens, f"its KV was evicted from the parked store (budget {format_bytes(self.budget)})")

    def drop(self, tokens: list[int], why: str) -> None:
        """Remembers that the state of `tokens` is not kept, and why."""
        self.dropped.append(Dropped(tokens, why))

    def take(self, key: int) -> ParkedEntry:
        """Removes and returns an entry (it goes back into a slot)."""
        return self.entries.pop(key)

    def touch(self, key: int) -> None:
        """Marks an entry as just used (last to be evicted)."""
        self.entries.move_to_end(key)

    def why_lost(self, prompt: list[int], reused: int) -> str | None:
        """Why a prompt that continues a dropped history gets fewer than its tokens back, if it does; the
        record is forgotten once said."""
        best, why = reused, None
        for d in self.dropped:
            n = common_prefix_len(d.tokens, prompt)
            # It must go on from most of that history (all but a reply re-tokenized), not merely share
            # an opening (a system prompt) with it.
            if n > best and 2 * n >= len(d.tokens):
                best, why = n, d
        if why is None:
            return None
        self.dropped.remove(why)
        return why.why

    def clear(self) -> None:
        """Forgets every entry (their states no longer fit the slots, e.g. after a re-partition)."""
        for entry in self.entries.values():
            self.drop(entry.tokens, "the slots were re-partitioned, which drops the parked KV")
        self.entries.clear()

    def _forget_dropped(self, tokens: list[int]) -> None:
        self.dropped = collections.deque(
            (d for d in self.dropped if common_prefix_len(d.tokens, tokens) < len(d.tokens)), maxlen=DROPPED_MEMORY
        )
