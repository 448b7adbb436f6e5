"""Full attention (mlx-lm's KVCache): each slot owns a fixed region of the layer's K/V buffer."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.engine.cpu.attention import KERNEL_DTYPES
from mlxchat.engine.kv.attention import attend_per_slot, rows_upto
from mlxchat.engine.kv.kv_types import KVType, StoredKV
from mlxchat.engine.kv.layout import PassLayout
from mlxchat.engine.kv.regions import KVRegions


class FullAttentionStore(KVRegions):
    """K/V buffers of shape (slots, kv_heads, per_slot, head_dim) for one layer, allocated on first use."""

    def __init__(self, n_slots: int, capacity: int, kv_type: KVType) -> None:
        super().__init__(n_slots, capacity, kv_type)
        self.capacity = capacity

    def exact_after_rollback(self, length: int, keep: int) -> bool:
        return True  # K/V past `keep` are simply overwritten later

    def copy_slot(self, other: "FullAttentionStore", slot: int, length: int) -> None:
        """Takes slot `slot`'s first `length` tokens from `other` (a store of another plan)."""
        if other.keys is None or other.values is None:
            return
        k, v = other.keys[slot : slot + 1, :, :length], other.values[slot : slot + 1, :, :length]
        self._allocate(k, v)
        self.keys[slot : slot + 1, :, :length] = k  # type: ignore[index]
        self.values[slot : slot + 1, :, :length] = v  # type: ignore[index]

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> "FullAttentionPass":
        return FullAttentionPass(self, layout, array_masks)


class FullAttentionPass:
    """mlx-lm's cache protocol for one full-attention layer in one pass: new K/V go to each row's region."""

    def __init__(self, store: FullAttentionStore, layout: PassLayout, array_masks: bool) -> None:
        self.store = store
        self.layout = layout
        # Models whose attention the slot dispatcher cannot see get the padded K/V and need an exact mask.
        self.array_masks = array_masks
        self.dtype = mx.float32  # what the model computes K/V in, from the pass's own

    @property
    def offset(self) -> int | mx.array:
        return self.layout.offset

    def stack_buffers(self) -> tuple[mx.array, mx.array] | None:
        """The layer's K and V buffers for the layer stack to write a pass's tokens in and attend over
        (engine.cpu.layer_stack), or None where the pass's tokens do not each attend as a decode row (a prompt's
        chunk) or the buffers are not one float array each (not allocated yet, or q8's values, scales and biases)."""
        store, lay = self.store, self.layout
        if not (lay.n_new == 1 or lay.per_token) or store.keys is None or store.values is None:
            return None
        if len(store.keys.parts) != 1 or len(store.values.parts) != 1:
            return None
        k, v = store.keys.parts[0], store.values.parts[0]
        return (k, v) if k.dtype in KERNEL_DTYPES and v.dtype == k.dtype else None

    def stack_wrote(self, keys: mx.array, values: mx.array) -> None:
        """Holds the layer stack's outputs as the layer's K and V buffers (their memory, with the step's rows in it)."""
        self.store.keys, self.store.values = StoredKV((keys,)), StoredKV((values,))

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> Any:
        """"causal"/None for the per-slot dispatcher; an exact array over the padded rows where asked."""
        lay = self.layout
        if return_array or window_size is not None or self.array_masks:
            return lay.causal_mask(window_size)
        if n > 1:
            return "causal"
        return None if len(set(lay.lengths)) == 1 else lay.valid()

    def plain_mask(self, mask: Any) -> bool:
        """Whether `mask` is one the per-slot attention can replace by its own (not an array the model built)."""
        return mask is None or isinstance(mask, str) or self.layout.made_valid(mask)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Writes the pass's new K/V into the slot regions; returns the rows' padded K/V views."""
        self.write(keys, values)
        return self.fetch_padded()

    def write(self, keys: mx.array, values: mx.array) -> None:
        """Writes the pass's new K/V into the slot regions (for code that attends with `attend`)."""
        store, lay = self.store, self.layout
        self.dtype = keys.dtype
        if lay.n_new == 1:
            store.write_rows(lay.scatter_index(keys.shape[1], store.capacity), keys, values)
        else:
            store._ensure(keys, values)
            k, v = store.kv_type.encode(keys), store.kv_type.encode(values)
            for i, (row, start) in enumerate(zip(lay.rows, lay.starts)):
                end = start + lay.n_new
                store.keys[row : row + 1, :, start:end] = k[i : i + 1]  # type: ignore[index]
                store.values[row : row + 1, :, start:end] = v[i : i + 1]  # type: ignore[index]

    def fetch_padded(self) -> tuple[mx.array, mx.array]:
        """The rows' K/V padded to the longest row, as the model computes them, for attention code that does not
        go per slot."""
        lay, store = self.layout, self.store
        longest = max(lay.lengths)
        return tuple(rows_upto(b, lay.rows, longest, store.kv_type, self.dtype)  # type: ignore[return-value]
                     for b in (store.keys, store.values))

    def attend(
        self, queries: mx.array, scale: float, sinks: mx.array | None, part: slice = slice(None)
    ) -> mx.array:
        """Attention of the pass's queries over each row's own tokens only.

        `part`: only these rows of the pass (`queries` holds just them), e.g. to run halves on two streams.
        """
        lay = self.layout
        if lay.per_token:
            return self._attend_by_token(queries, scale, sinks, part)
        return attend_per_slot(
            queries,
            self.store.keys,  # type: ignore[arg-type]
            self.store.values,  # type: ignore[arg-type]
            lay.rows[part],
            lay.lengths[part],
            kv_type=self.store.kv_type,
            valid=lambda: lay.valid()[part],
            scale=scale,
            sinks=sinks,
            slot_arrays=lambda: lay.slot_arrays(part),
        )

    def _attend_by_token(self, queries: mx.array, scale: float, sinks: mx.array | None, part: slice) -> mx.array:
        """`attend` with each of the L new tokens of a row attending as a decode row of its own: the same sums in the
        same order as the single steps (a chunk's queries share each key block, which rounds otherwise)."""
        b, heads, n, dim = queries.shape
        slots, lengths, valid, arrays = self.layout.token_rows(part)
        one_by_one = queries.transpose(0, 2, 1, 3).reshape(b * n, heads, 1, dim)
        out = attend_per_slot(one_by_one, self.store.keys, self.store.values, slots, lengths,  # type: ignore[arg-type]
                              kv_type=self.store.kv_type, valid=lambda: valid, scale=scale, sinks=sinks,
                              slot_arrays=lambda: arrays)
        return out.reshape(b, n, heads, -1).transpose(0, 2, 1, 3)
