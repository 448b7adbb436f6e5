"""Divided KV cache: each slot owns a fixed region of every layer's buffer; plugs into mlx-lm models."""

from __future__ import annotations

import mlx.core as mx

from engine.slot_attention import attend_per_slot, rows_upto


class SlotKVStore:
    """K/V buffers of shape (slots, kv_heads, per_slot, head_dim) per layer, allocated on first use.

    The total is slots x per-slot tokens, so a fixed total context costs the same memory for any N.
    `lengths[i]` counts the tokens of slot i whose K/V are stored.
    """

    def __init__(self, n_slots: int, capacity: int, n_layers: int) -> None:
        self.n_slots = n_slots
        self.capacity = capacity
        self.n_layers = n_layers
        self.lengths = [0] * n_slots
        self.keys: list[mx.array | None] = [None] * n_layers
        self.values: list[mx.array | None] = [None] * n_layers

    @property
    def nbytes(self) -> int:
        """Bytes allocated for K and V of every layer."""
        return sum(a.nbytes for a in self.keys + self.values if a is not None)

    def bytes_per_token(self) -> int:
        """K+V bytes of one token across all layers (0 before the first write)."""
        return self.nbytes // (self.n_slots * self.capacity) if self.keys[0] is not None else 0

    def batch(self, rows: list[int], n_new: int) -> list["SlotBatchCache"]:
        """The per-layer caches for one forward pass over `rows`, each adding `n_new` tokens."""
        if any(self.lengths[r] + n_new > self.capacity for r in rows):
            raise ValueError("a slot's KV region is full")
        starts = [self.lengths[r] for r in rows]
        shared = _PassLayout(rows, starts, n_new, self.capacity)
        return [SlotBatchCache(self, layer, shared) for layer in range(self.n_layers)]

    def commit(self, rows: list[int], counts: list[int]) -> None:
        """Records that a pass stored `counts[i]` more real tokens for slot `rows[i]`.

        A right-padded row stores padding after its real tokens; not counting it leaves it to be
        overwritten, and causal attention never lets a real token see it.
        """
        for r, n in zip(rows, counts):
            self.lengths[r] += n

    def _ensure(self, layer: int, keys: mx.array, values: mx.array) -> None:
        if self.keys[layer] is None:
            _, h, _, kd = keys.shape
            vd = values.shape[-1]
            self.keys[layer] = mx.zeros((self.n_slots, h, self.capacity, kd), keys.dtype)
            self.values[layer] = mx.zeros((self.n_slots, h, self.capacity, vd), values.dtype)


class _PassLayout:
    """Row/offset bookkeeping of one forward pass, shared by all layers' caches."""

    def __init__(self, rows: list[int], starts: list[int], n_new: int, capacity: int) -> None:
        self.rows = rows
        self.starts = starts
        self.n_new = n_new
        self.lengths = [s + n_new for s in starts]
        # RoPE wants one offset per row; a single row can use a plain int (faster path).
        self.offset: int | mx.array = starts[0] if len(rows) == 1 else mx.array(starts)
        self.capacity = capacity
        self._scatter_index: mx.array | None = None
        self._valid: mx.array | None = None

    def scatter_index(self, heads: int) -> mx.array:
        """Flat (slot, head, position) indices of each row's new token, for one scatter per layer."""
        if self._scatter_index is None:
            rows = mx.array(self.rows)[:, None]
            starts = mx.array(self.starts)[:, None]
            self._scatter_index = (rows * heads + mx.arange(heads)[None]) * self.capacity + starts
        return self._scatter_index

    def valid(self) -> mx.array:
        """(rows, 1, 1, longest) mask of each row's own tokens, made once for all layers."""
        if self._valid is None:
            longest = max(self.lengths)
            self._valid = (mx.arange(longest)[None] < mx.array(self.lengths)[:, None])[:, None, None, :]
        return self._valid


class SlotBatchCache:
    """mlx-lm's cache protocol for one layer of one pass: stores the new K/V in each row's slot region."""

    def __init__(self, store: SlotKVStore, layer: int, layout: _PassLayout) -> None:
        self.store = store
        self.layer = layer
        self.layout = layout

    @property
    def offset(self) -> int | mx.array:
        return self.layout.offset

    def make_mask(
        self, n: int, return_array: bool = False, window_size: int | None = None
    ) -> mx.array | str | None:
        """The mask for attention code that uses `fetch_padded` (the slot dispatcher ignores it)."""
        lay = self.layout
        if n > 1:
            return "causal"
        return None if len(set(lay.lengths)) == 1 else lay.valid()

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Writes the pass's new K/V into the slot regions; returns the rows' padded K/V views."""
        store, layer, lay = self.store, self.layer, self.layout
        store._ensure(layer, keys, values)
        if lay.n_new == 1:
            idx = lay.scatter_index(keys.shape[1])
            for buffers, new in ((store.keys, keys), (store.values, values)):
                flat = buffers[layer].reshape(-1, new.shape[-1])
                flat[idx] = new[:, :, 0, :]
                buffers[layer] = flat.reshape(buffers[layer].shape)
        else:
            for i, (row, start) in enumerate(zip(lay.rows, lay.starts)):
                end = start + lay.n_new
                store.keys[layer][row : row + 1, :, start:end, :] = keys[i : i + 1]
                store.values[layer][row : row + 1, :, start:end, :] = values[i : i + 1]
        return self.fetch_padded()

    def fetch_padded(self) -> tuple[mx.array, mx.array]:
        """The rows' K/V padded to the longest row, for attention code that does not go per slot."""
        lay, layer = self.layout, self.layer
        longest = max(lay.lengths)
        return (
            rows_upto(self.store.keys[layer], lay.rows, longest),
            rows_upto(self.store.values[layer], lay.rows, longest),
        )

    def attend(self, queries: mx.array, scale: float, sinks: mx.array | None) -> mx.array:
        """Attention of the pass's queries over each row's own tokens only."""
        lay = self.layout
        return attend_per_slot(
            queries,
            self.store.keys[self.layer],
            self.store.values[self.layer],
            lay.rows,
            lay.lengths,
            valid=lay.valid,
            scale=scale,
            sinks=sinks,
        )
