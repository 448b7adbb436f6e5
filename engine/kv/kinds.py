"""Which slot store serves each kind of layer cache mlx-lm's `model.make_cache()` asks for, and what each costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx

from mlxchat.engine.kv.composite import CompositeStore
from mlxchat.engine.kv.full import FullAttentionStore
from mlxchat.engine.kv.layout import PassLayout
from mlxchat.engine.kv.recurrent import RecurrentStore
from mlxchat.engine.kv.window import WindowStore

# How each supported mlx-lm cache class is held per slot (what `mlxchat models` prints).
KIND_NOTES = {
    "KVCache": "full attention: a K/V region of per-slot context tokens in each slot",
    "RotatingKVCache": "sliding window: a ring of min(window, per-slot context) tokens in each slot, exact window mask",
    "ArraysCache": "recurrent state (convolution, SSM, DeltaNet): one state per slot, reset on clear",
    "CacheList": "composite: each part held as its own kind",
}


class SlotStore(Protocol):
    """One layer's caches for every slot; `pass_cache` gives mlx-lm's cache protocol for one forward pass."""

    @property
    def arrays(self) -> list[mx.array]: ...

    def bytes_held(self, length: int) -> int: ...

    def exact_after_rollback(self, length: int, keep: int) -> bool: ...

    def reset(self, slot: int) -> None: ...

    def snapshot(self) -> None: ...

    def undo(self, slot: int) -> None: ...

    def copy_slot(self, other: Any, slot: int, length: int) -> None: ...

    def save(self, slot: int, length: int) -> Any: ...

    def load(self, slot: int, saved: Any, length: int) -> None: ...

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> Any: ...


class UnsupportedCache(Exception):
    """A layer asks for a cache kind the slot stores cannot hold; the message names it."""


def cache_kind(proto: Any) -> str:
    """The supported mlx-lm cache class `proto` is (exact class, subclasses change behaviour), or raises."""
    name = type(proto).__name__
    module = type(proto).__module__
    if module != "mlx_lm.models.cache" or name not in KIND_NOTES:
        raise UnsupportedCache(f"layer cache {name} is not one the engine can divide into slots")
    if name == "RotatingKVCache" and proto.keep:
        raise UnsupportedCache(f"a sliding window that keeps {proto.keep} first tokens (attention sinks by position)")
    if name == "CacheList":
        for part in proto.caches:
            cache_kind(part)
    return name


def store_for(proto: Any, n_slots: int, capacity: int) -> SlotStore:
    """A slot store for one layer whose single-sequence cache would be `proto`."""
    kind = cache_kind(proto)
    if kind == "KVCache":
        return FullAttentionStore(n_slots, capacity)
    if kind == "RotatingKVCache":
        return WindowStore(n_slots, capacity, proto.max_size)
    if kind == "ArraysCache":
        return RecurrentStore(n_slots, len(proto.cache))
    return CompositeStore([store_for(p, n_slots, capacity) for p in proto.caches])


@dataclass(frozen=True)
class KVFootprint:
    """Bytes a slot's caches cost, by layer kind: full layers per token, windows per token up to
    their window, recurrent state a constant per slot."""

    full_bytes_per_token: int = 0
    windows: tuple[tuple[int, int], ...] = ()  # (window, bytes per token) of each window layer
    recurrent_bytes_per_slot: int = 0

    @property
    def bytes_per_token(self) -> int:
        """K+V bytes one token adds while every window still grows (the cost before any window is full)."""
        return self.full_bytes_per_token + sum(b for _, b in self.windows)

    def per_slot_bytes(self, per_slot: int) -> int:
        """What one slot of `per_slot` tokens holds, every layer kind at its own size."""
        windows = sum(b * min(w, per_slot) for w, b in self.windows)
        return self.full_bytes_per_token * per_slot + windows + self.recurrent_bytes_per_slot


def footprint(cache: list[Any]) -> KVFootprint:
    """The footprint of mlx-lm caches after a one-token forward (shapes only: nothing is evaluated)."""
    full, recurrent = 0, 0
    windows: list[tuple[int, int]] = []

    def add(c: Any) -> None:
        nonlocal full, recurrent
        kind = cache_kind(c)
        if kind == "CacheList":
            for part in c.caches:
                add(part)
        elif kind == "ArraysCache":
            recurrent += sum(a.nbytes for a in c.cache if a is not None)
        elif c.keys is not None:
            # (batch 1, heads, allocated tokens, head dim) arrays.
            per_token = sum(a.nbytes // a.shape[-2] for a in (c.keys, c.values))
            if kind == "RotatingKVCache":
                windows.append((c.max_size, per_token))
            else:
                full += per_token

    for c in cache:
        add(c)
    return KVFootprint(full, tuple(windows), recurrent)
