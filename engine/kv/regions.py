"""What full-attention regions and window rings share: K/V buffers of (slots, kv_heads, size, head_dim)."""

from __future__ import annotations

import mlx.core as mx


class KVRegions:
    """One layer's K/V buffers, `size` tokens a slot, allocated on the first write.

    A slot of `length` tokens holds its first min(length, size) positions at indices 0.. until a
    ring wraps; a full region never does (size = per-slot context).
    """

    def __init__(self, n_slots: int, size: int) -> None:
        self.n_slots = n_slots
        self.size = size
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self._token_bytes = 0  # K + V of one token of one slot, once allocated (the snapshot asks it often)

    @property
    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def bytes_held(self, length: int) -> int:
        """Bytes one slot of `length` tokens fills (a ring stops growing at `size`)."""
        return self._token_bytes * min(length, self.size)

    def reset(self, slot: int) -> None:
        pass  # positions past a slot's length are overwritten before anything reads them

    def checkpoint(self) -> None:
        pass

    def undo(self, slot: int) -> None:
        pass  # a wasted decode write lands past the slot's length, or where no later query looks

    def save(self, slot: int, length: int) -> tuple[mx.array, mx.array] | None:
        """A copy of what the slot holds at `length` tokens (for the parked store)."""
        if self.keys is None or self.values is None:
            return None
        held = min(length, self.size)
        return mx.array(self.keys[slot : slot + 1, :, :held]), mx.array(self.values[slot : slot + 1, :, :held])

    def load(self, slot: int, saved: tuple[mx.array, mx.array] | None, length: int) -> None:
        """Puts K/V from `save` back into the slot, as its first `length` tokens (at most what was saved)."""
        if saved is None:
            return
        k, v = saved
        self._ensure(k, v)
        held = min(k.shape[2], length)
        self.keys[slot : slot + 1, :, :held] = k[:, :, :held]  # type: ignore[index]
        self.values[slot : slot + 1, :, :held] = v[:, :, :held]  # type: ignore[index]

    def _ensure(self, keys: mx.array, values: mx.array) -> None:
        if self.keys is None:
            _, h, _, kd = keys.shape
            self.keys = mx.zeros((self.n_slots, h, self.size, kd), keys.dtype)
            self.values = mx.zeros((self.n_slots, h, self.size, values.shape[-1]), values.dtype)
            self._token_bytes = (self.keys.nbytes + self.values.nbytes) // (self.n_slots * self.size)
