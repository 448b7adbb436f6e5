"""What full-attention regions and window rings share: K/V buffers of (slots, kv_heads, size, head_dim)."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.cpu.attention import kernel_kv_write
from mlxchat.engine.kv.kv_types import KVType, StoredKV


class KVRegions:
    """One layer's K/V buffers, `size` tokens a slot, allocated on the first write, stored as `kv_type` says.

    A slot of `length` tokens holds its first min(length, size) positions at indices 0.. until a
    ring wraps; a full region never does (size = per-slot context).
    """

    def __init__(self, n_slots: int, size: int, kv_type: KVType) -> None:
        self.n_slots = n_slots
        self.size = size
        self.kv_type = kv_type
        self.keys: StoredKV | None = None
        self.values: StoredKV | None = None
        self._token_bytes = 0  # K + V of one token of one slot, once allocated (the snapshot asks it often)

    @property
    def arrays(self) -> list[mx.array]:
        return [a for stored in (self.keys, self.values) if stored is not None for a in stored.parts]

    def bytes_held(self, length: int) -> int:
        """Bytes one slot of `length` tokens fills (a ring stops growing at `size`)."""
        return self._token_bytes * min(length, self.size)

    def reset(self, slot: int) -> None:
        pass  # positions past a slot's length are overwritten before anything reads them

    def checkpoint(self) -> None:
        pass

    def undo(self, slot: int) -> None:
        pass  # a wasted decode write lands past the slot's length, or where no later query looks

    def save(self, slot: int, length: int) -> tuple[tuple[mx.array, ...], tuple[mx.array, ...]] | None:
        """A copy of what the slot holds at `length` tokens, K's parts and V's in their stored type (for the parked
        store and the disk): not a view, since a decode step writes the buffers in place (engine.cpu.layer_stack)."""
        if self.keys is None or self.values is None:
            return None
        held = min(length, self.size)
        k, v = (b[slot : slot + 1, :, :held].map(mx.array) for b in (self.keys, self.values))
        return k.parts, v.parts

    def load(self, slot: int, saved: tuple[tuple[mx.array, ...], tuple[mx.array, ...]] | None, length: int) -> None:
        """Puts K/V from `save` back into the slot, as its first `length` tokens (at most what was saved)."""
        if saved is None:
            return
        k, v = StoredKV(saved[0]), StoredKV(saved[1])
        self._allocate(k, v)
        held = min(k.shape[2], length)
        self.keys[slot : slot + 1, :, :held] = k[:, :, :held]  # type: ignore[index]
        self.values[slot : slot + 1, :, :held] = v[:, :, :held]  # type: ignore[index]

    def write_rows(self, flat_index: mx.array, keys: mx.array, values: mx.array) -> None:
        """A decode pass's new K/V (B, heads, 1, dim), as the model computes them, into the (slot, head, position)
        rows `flat_index` (B, heads): by one kernel operation each, in place, where it runs (MLX's cast, slices,
        reshapes and scatter took five each, in every layer of every step), else cast and scattered by MLX."""
        self._ensure(keys, values)
        assert self.keys is not None and self.values is not None
        written = kernel_kv_write(self.keys.parts, self.values.parts, keys, values, flat_index)
        if written is not None:
            self.keys, self.values = StoredKV(written[:1]), StoredKV(written[1:])
            return
        k, v = self.kv_type.encode(keys), self.kv_type.encode(values)
        self.keys = self.keys.scatter(flat_index, k[:, :, 0])
        self.values = self.values.scatter(flat_index, v[:, :, 0])

    def _ensure(self, keys: mx.array, values: mx.array) -> None:
        """Allocates the buffers for new K/V (slots, heads, tokens, dim) as the model computes them."""
        if self.keys is None:
            self._allocate(self.kv_type.encode(keys[:1, :, :1]), self.kv_type.encode(values[:1, :, :1]))

    def _allocate(self, keys: StoredKV, values: StoredKV) -> None:
        """Allocates the buffers after stored K/V of one slot, of their parts' types and widths."""
        if self.keys is None:
            self.keys, self.values = (
                stored.map(lambda a: mx.zeros((self.n_slots, a.shape[1], self.size, a.shape[3]), a.dtype))
                for stored in (keys, values)
            )
            self._token_bytes = sum(a.nbytes for a in self.arrays) // (self.n_slots * self.size)
