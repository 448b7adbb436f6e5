"""Recurrent state (mlx-lm's ArraysCache: convolution and SSM / DeltaNet states): one state per slot."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache

from mlxchat.engine.kv.layout import PassLayout


class RecurrentStore:
    """The layer's state arrays with the slots as their first axis, allocated on first write.

    A state sums up every token a slot has seen, so it cannot be rolled back: only kept
    whole, or reset to the start. `checkpoint` keeps the state from before the latest decode
    pass, so a row that pass computed for nothing can be put back (`undo`).
    """

    def __init__(self, n_slots: int, size: int) -> None:
        self.n_slots = n_slots
        self.states: list[mx.array | None] = [None] * size
        self._before: list[mx.array | None] | None = None

    @property
    def arrays(self) -> list[mx.array]:
        return [a for a in self.states if a is not None]

    def bytes_held(self, length: int) -> int:
        """Bytes one slot's state takes, whatever its length (nothing before its first token)."""
        return sum(a.nbytes for a in self.arrays) // self.n_slots if length else 0

    def exact_after_rollback(self, length: int, keep: int) -> bool:
        return keep >= length

    def reset(self, slot: int) -> None:
        for i, state in enumerate(self.states):
            if state is not None:
                state[slot : slot + 1] = mx.zeros_like(state[slot : slot + 1])
                self.states[i] = state

    def checkpoint(self) -> None:
        # New handles: a pass's writes replace the store's arrays in place, not these.
        self._before = [None if s is None else mx.array(s) for s in self.states]

    def undo(self, slot: int) -> None:
        if self._before is None:
            return
        for i, (state, before) in enumerate(zip(self.states, self._before)):
            if state is not None:
                old = before[slot : slot + 1] if before is not None else mx.zeros_like(state[slot : slot + 1])
                state[slot : slot + 1] = old
                self.states[i] = state

    def copy_slot(self, other: "RecurrentStore", slot: int, length: int) -> None:
        for i, state in enumerate(other.states):
            if state is None:
                continue
            if self.states[i] is None:
                self.states[i] = mx.zeros((self.n_slots, *state.shape[1:]), state.dtype)
            self.states[i][slot : slot + 1] = state[slot : slot + 1]  # type: ignore[index]

    def save(self, slot: int, length: int) -> list[mx.array | None]:
        """A copy of the slot's states (for the parked store): they sum up all `length` tokens."""
        return [None if s is None else mx.array(s[slot : slot + 1]) for s in self.states]

    def load(self, slot: int, saved: list[mx.array | None], length: int) -> None:
        """Puts states from `save` back into the slot."""
        for i, state in enumerate(saved):
            if state is None:
                continue
            if self.states[i] is None:
                self.states[i] = mx.zeros((self.n_slots, *state.shape[1:]), state.dtype)
            self.states[i][slot : slot + 1] = state  # type: ignore[index]

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> "RecurrentPass":
        return RecurrentPass(self, layout)


class RecurrentPass(ArraysCache):
    """mlx-lm's ArraysCache protocol for one layer in one pass: reads and writes the rows' states.

    An ArraysCache by class too: some layers write their state back only to one (Mamba's
    `isinstance(cache, ArraysCache)`). Right-padded prefill rows set `lengths`, which most of
    mlx-lm's recurrent layers use to stop each row's state at its last real token (as in its
    BatchGenerator); engine.loading.batch_check finds the models that do not.
    """

    # No super().__init__(): the states live in the store, not in ArraysCache's own list.
    def __init__(self, store: RecurrentStore, layout: PassLayout) -> None:
        self.store = store
        self.layout = layout
        self._rows = mx.array(layout.rows)
        self.lengths: mx.array | None = mx.array(layout.counts) if layout.padded else None
        self.left_padding = None

    @property
    def offset(self) -> int | mx.array:
        return self.layout.offset

    @property
    def batch_size(self) -> int:
        return len(self.layout.rows)

    def __getitem__(self, i: int) -> mx.array | None:
        state = self.store.states[i]
        return None if state is None else state[self._rows]

    def __setitem__(self, i: int, value: mx.array) -> None:
        store = self.store
        if store.states[i] is None:
            store.states[i] = mx.zeros((store.n_slots, *value.shape[1:]), value.dtype)
        state = store.states[i]
        state[self._rows] = value.astype(state.dtype)  # type: ignore[index]
        store.states[i] = state

    def advance(self, n: int) -> None:
        if self.lengths is not None:
            self.lengths = self.lengths - n

    def make_mask(self, n: int, **_: Any) -> mx.array | None:
        if self.lengths is None:
            return None
        return mx.arange(n)[None] < self.lengths[:, None]
