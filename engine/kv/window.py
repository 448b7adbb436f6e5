"""Sliding-window attention (mlx-lm's RotatingKVCache): each slot keeps a ring of its last `window` tokens."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.kv.attention import rows_upto
from mlxchat.engine.kv.kv_types import KVType
from mlxchat.engine.kv.layout import PassLayout
from mlxchat.engine.kv.regions import KVRegions


class WindowStore(KVRegions):
    """K/V rings of shape (slots, kv_heads, size, head_dim) for one layer; size = min(window, per slot).

    Position p of a slot lives at ring index p mod size. A query sees exactly the keys
    p - window < k <= p, as with mlx-lm's RotatingKVCache alone (attention sinks included).
    """

    def __init__(self, n_slots: int, capacity: int, window: int, kv_type: KVType) -> None:
        super().__init__(n_slots, min(window, capacity), kv_type)
        self.window = window

    def exact_after_rollback(self, length: int, keep: int) -> bool:
        """Whether the ring still holds every key a query at `keep` needs (nothing overwritten yet)."""
        return length <= self.size or keep >= length - 1

    def copy_slot(self, other: "WindowStore", slot: int, length: int) -> None:
        """Takes slot `slot`'s ring from `other`, if the positions it holds land at the same indices."""
        if other.keys is None or other.values is None:
            return
        self._allocate(other.keys, other.values)
        positions = range(max(0, length - min(self.size, other.size)), length)
        src = mx.array([p % other.size for p in positions])
        dst = mx.array([p % self.size for p in positions])
        heads = other.keys.shape[1]
        idx = (slot * heads + mx.arange(heads))[:, None] * self.size + dst[None]
        self.keys = self.keys.scatter(idx, other.keys[slot].map(lambda a: mx.take(a, src, axis=1)))  # type: ignore[union-attr]
        self.values = self.values.scatter(idx, other.values[slot].map(lambda a: mx.take(a, src, axis=1)))  # type: ignore[union-attr]

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> "WindowPass":
        return WindowPass(self, layout)


class WindowPass:
    """mlx-lm's cache protocol for one window layer in one pass.

    The model attends over each row's ring followed by the pass's new K/V, with an exact
    position mask; then each row's real new tokens (the last `size` of them) enter its ring.
    """

    def __init__(self, store: WindowStore, layout: PassLayout) -> None:
        self.store = store
        self.layout = layout
        # A decode pass writes first and attends over the rings alone: no copy of ring plus new token.
        self.decode = layout.n_new == 1 and not layout.padded

    @property
    def offset(self) -> int | mx.array:
        return self.layout.offset

    @property
    def max_size(self) -> int:
        return self.store.window

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        window = window_size or self.store.window
        if self.decode:
            return self.layout.ring_decode_mask(self.store.size, window)
        return self.layout.ring_mask(self.store.size, window)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        store, lay = self.store, self.layout
        kv_type = store.kv_type
        rows = mx.array(lay.rows)
        if self.decode:
            # One write per buffer for all rows, as the full-attention store does.
            heads = keys.shape[1]
            at = mx.array([s % store.size for s in lay.starts])[:, None]
            store.write_rows((rows[:, None] * heads + mx.arange(heads)[None]) * store.size + at, keys, values)
            return tuple(rows_upto(b, lay.rows, store.size, kv_type, keys.dtype)  # type: ignore[return-value]
                         for b in (store.keys, store.values))
        store._ensure(keys, values)
        new_k, new_v = kv_type.encode(keys), kv_type.encode(values)
        # The ring as it was, then the pass's keys as stored and read back (as a later pass will read them).
        ring_k, ring_v = (kv_type.decode(b[rows], keys.dtype) for b in (store.keys, store.values))  # type: ignore[index]
        for i, (row, start, count) in enumerate(zip(lay.rows, lay.starts, lay.counts)):
            first = max(0, count - store.size)
            for lo, hi, at in _segments(start + first, start + count, store.size):
                store.keys[row : row + 1, :, at : at + hi - lo] = new_k[i : i + 1, :, lo - start : hi - start]  # type: ignore[index]
                store.values[row : row + 1, :, at : at + hi - lo] = new_v[i : i + 1, :, lo - start : hi - start]  # type: ignore[index]
        read_k, read_v = kv_type.decode(new_k, keys.dtype), kv_type.decode(new_v, keys.dtype)
        return mx.concatenate([ring_k, read_k], axis=2), mx.concatenate([ring_v, read_v], axis=2)


def _segments(lo: int, hi: int, size: int) -> list[tuple[int, int, int]]:
    """Positions lo..hi-1 (at most `size` of them) as runs (from, to, ring index of `from`) that do not wrap."""
    runs = []
    while lo < hi:
        at = lo % size
        end = min(hi, lo + size - at)
        runs.append((lo, end, at))
        lo = end
    return runs
