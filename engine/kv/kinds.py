"""Which slot store serves each kind of layer cache mlx-lm's `model.make_cache()` asks for, and what each costs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache

from mlxchat.engine.kv.attention import q8_unreadable
from mlxchat.engine.kv.composite import CompositeStore
from mlxchat.engine.kv.full import FullAttentionStore
from mlxchat.engine.kv.kv_types import KVType, UnsupportedKV
from mlxchat.engine.kv.layout import PassLayout
from mlxchat.engine.kv.recurrent import RecurrentStore
from mlxchat.engine.kv.window import WindowStore


class LayerStore(Protocol):
    """One layer's caches for every slot; `pass_cache` gives mlx-lm's cache protocol for one forward pass."""

    @property
    def arrays(self) -> list[mx.array]: ...

    def bytes_held(self, length: int) -> int: ...

    def exact_after_rollback(self, length: int, keep: int) -> bool: ...

    def reset(self, slot: int) -> None: ...

    def checkpoint(self) -> None: ...

    def undo(self, slot: int) -> None: ...

    def copy_slot(self, other: Any, slot: int, length: int) -> None: ...

    def save(self, slot: int, length: int) -> Any: ...

    def load(self, slot: int, saved: Any, length: int) -> None: ...

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> Any: ...


class UnsupportedCache(Exception):
    """A layer asks for a cache kind the slot stores cannot hold; the message names it."""


@dataclass(frozen=True)
class CacheKind:
    """How the slots hold one mlx-lm cache class: what `mlxchat models` says, the store, and its cost."""

    note: str
    store: Callable[[Any, int, int, KVType], LayerStore]  # (the layer's own cache, slots, per-slot capacity, K/V type)
    cost: Callable[[Any, "_Costs", KVType], None]  # adds the cost of a cache after a one-token forward
    refuse: Callable[[Any], str | None] = lambda proto: None  # why this instance cannot be held, if it cannot


def _attention_cost(window: bool) -> Callable[[Any, "_Costs", KVType], None]:
    def cost(c: Any, costs: _Costs, kv_type: KVType) -> None:
        if c.keys is not None:  # (batch 1, heads, allocated tokens, head dim) arrays, as stored in kv_type
            if kv_type.quantized and (why := q8_unreadable(c.keys.shape[-1])):
                raise UnsupportedKV(f'kv_dtype = "q8": MLX on this device cannot read 8-bit K/V of this model\'s '
                                    f"{c.keys.shape[-1]}-value heads ({why}): use float16 or bfloat16")
            stored = [kv_type.encode(a[:, :, :1]) for a in (c.keys, c.values)]
            per_token = sum(a.nbytes for s in stored for a in s.parts)
            if window:
                costs.windows.append((c.max_size, per_token))
            else:
                costs.full += per_token

    return cost


def _state_cost(c: Any, costs: _Costs, kv_type: KVType) -> None:
    costs.recurrent += sum(a.nbytes for a in c.cache if a is not None)


def _parts_cost(c: Any, costs: _Costs, kv_type: KVType) -> None:
    for part in c.caches:
        kind_of(part).cost(part, costs, kv_type)


def _refuse_parts(proto: Any) -> str | None:
    for part in proto.caches:
        kind_of(part)  # raises for a part no store holds
    return None


# Every mlx-lm cache class the slots can hold, by class: the one place a kind is named.
KINDS: dict[type, CacheKind] = {
    KVCache: CacheKind(
        "full attention: a K/V region of per-slot context tokens in each slot",
        lambda proto, n, capacity, kv_type: FullAttentionStore(n, capacity, kv_type),
        _attention_cost(window=False),
    ),
    RotatingKVCache: CacheKind(
        "sliding window: a ring of min(window, per-slot context) tokens in each slot, exact window mask",
        lambda proto, n, capacity, kv_type: WindowStore(n, capacity, proto.max_size, kv_type),
        _attention_cost(window=True),
        lambda proto: f"a sliding window that keeps {proto.keep} first tokens (attention sinks by position)"
        if proto.keep
        else None,
    ),
    ArraysCache: CacheKind(
        "recurrent state (convolution, SSM, DeltaNet): one state per slot, reset on clear",
        lambda proto, n, capacity, kv_type: RecurrentStore(n, len(proto.cache)),
        _state_cost,
    ),
    CacheList: CacheKind(
        "composite: each part held as its own kind",
        lambda proto, n, capacity, kv_type: CompositeStore([kind_of(p).store(p, n, capacity, kv_type) for p in proto.caches]),
        _parts_cost,
        _refuse_parts,
    ),
}
KIND_NOTES = {cls.__name__: kind.note for cls, kind in KINDS.items()}


def kind_of(proto: Any) -> CacheKind:
    """How the slots hold `proto`'s class (the exact class: subclasses change behaviour), or raises."""
    kind = KINDS.get(type(proto))
    if kind is None:
        raise UnsupportedCache(f"layer cache {type(proto).__name__} is not one the engine can divide into slots")
    why = kind.refuse(proto)
    if why:
        raise UnsupportedCache(why)
    return kind


def cache_kind(proto: Any) -> str:
    """The name of the supported mlx-lm cache class `proto` is, or raises UnsupportedCache."""
    kind_of(proto)
    return type(proto).__name__


def store_for(proto: Any, n_slots: int, capacity: int, kv_type: KVType) -> LayerStore:
    """A slot store for one layer whose single-sequence cache would be `proto`, its K/V held as `kv_type`."""
    return kind_of(proto).store(proto, n_slots, capacity, kv_type)


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


@dataclass
class _Costs:
    full: int = 0
    windows: list[tuple[int, int]] = field(default_factory=list)
    recurrent: int = 0


def model_footprint(model: Any, kv_type: KVType) -> KVFootprint:
    """What `model`'s slots hold per token (attention K/V, stored as `kv_type`) and per sequence (recurrent state), by
    layer kind; UnsupportedKV where its heads cannot be stored so."""
    from mlx_lm.models.cache import make_prompt_cache

    # A one-token forward is built but never evaluated: shapes and dtypes are known without computing.
    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    return footprint(cache, kv_type)


def footprint(cache: list[Any], kv_type: KVType = KVType()) -> KVFootprint:
    """The footprint of mlx-lm caches after a one-token forward, attention K/V stored as `kv_type` (shapes only:
    nothing is evaluated); UnsupportedKV where the heads cannot be stored so."""
    costs = _Costs()
    for c in cache:
        kind_of(c).cost(c, costs, kv_type)
    return KVFootprint(costs.full, tuple(costs.windows), costs.recurrent)
