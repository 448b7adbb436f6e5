"""The slots' caches: for every layer, the store its kind needs (engine.kv.kinds); plugs into mlx-lm models."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.engine.kv.kinds import LayerStore, store_for
from mlxchat.engine.kv.kv_types import KVType
from mlxchat.engine.kv.layout import PassLayout


class SlotKVStore:
    """Each layer's slot store (full K/V regions, window rings, recurrent states) for `n_slots` slots.

    Full-attention regions hold `capacity` tokens per slot, so a fixed total context costs the
    same memory for any N. `lengths[i]` counts the tokens slot i has been through.
    """

    def __init__(
        self, n_slots: int, capacity: int, layers: list[Any] | int, array_masks: bool = False, mask_rank: int = 4,
        kv_type: KVType = KVType(),
    ) -> None:
        """`layers`: the model's `make_cache()` (one prototype per layer), or a layer count for all full attention;
        `kv_type`: how attention layers store K/V (as the model computes them by default)."""
        from mlx_lm.models.cache import KVCache

        protos = [KVCache() for _ in range(layers)] if isinstance(layers, int) else layers
        self.n_slots = n_slots
        self.capacity = capacity
        self.prototypes = protos
        self.array_masks = array_masks
        self.mask_rank = mask_rank
        self.kv_type = kv_type
        self.layers: list[LayerStore] = [store_for(p, n_slots, capacity, kv_type) for p in protos]
        self.lengths = [0] * n_slots

    @classmethod
    def for_model(
        cls, model: Any, n_slots: int, capacity: int, per_slot_dispatch: bool, kv_type: KVType | None = None
    ) -> "SlotKVStore":
        """The slot caches `model` needs: per layer the kind its own cache has, with masks it can use.

        Array masks, exact over the rows' padded K/V, where per-slot attention cannot serve every
        layer: the slot dispatcher is not installed (the model does its own attention), or later
        layers attend over earlier layers' K/V with the model's mask (Gemma 4's shared K/V:
        make_cache() has fewer entries than layers).
        """
        cache = model.make_cache() if hasattr(model, "make_cache") else None
        layers = cache if cache is not None else len(model.layers)
        shares_kv = cache is not None and len(cache) < len(model.layers)
        return cls(n_slots, capacity, layers, array_masks=shares_kv or not per_slot_dispatch,
                   mask_rank=_mask_rank(model), kv_type=kv_type or KVType())

    @property
    def arrays(self) -> list[Any]:
        """Every allocated buffer, to evaluate after a pass whose only output is the caches (none of a layer another
        store took: take_from, while a snapshot from another thread may read this one)."""
        return [a for s in self.layers if s is not None for a in s.arrays]

    @property
    def nbytes(self) -> int:
        """Bytes allocated by every layer's store."""
        return sum(a.nbytes for a in self.arrays)

    def bytes_used(self, slot: int) -> int:
        """Bytes slot `slot` holds now (full layers by its length, windows up to their ring, states whole)."""
        return sum(s.bytes_held(self.lengths[slot]) for s in self.layers if s is not None)

    def exact_prefix(self, slot: int, keep: int) -> int:
        """The longest prefix, at most `keep` tokens, that every layer can roll slot `slot` back to exactly."""
        return self.exact_within(self.lengths[slot], keep)

    def exact_within(self, length: int, keep: int) -> int:
        """`keep` if every layer holding `length` tokens can go back to its first `keep` exactly, else 0.

        Full attention can keep any prefix; a window ring or a recurrent state only what it has not
        yet overwritten or folded in; else the slot starts over (0).
        """
        if keep >= length or all(s.exact_after_rollback(length, keep) for s in self.layers):
            return keep
        return 0

    @property
    def rolls_back(self) -> bool:
        """Whether every layer can give back any number of a slot's latest tokens exactly (full attention, or a
        window no shorter than the slot): what checking drafts needs, as their rejected tokens' K/V are dropped."""
        return all(s.exact_after_rollback(self.capacity, 1) for s in self.layers)

    def save(self, slot: int) -> tuple[list[Any], int]:
        """A copy of every layer's state for slot `slot` (evaluated, owning its memory) and its bytes."""
        saved = [s.save(slot, self.lengths[slot]) for s in self.layers]
        arrays = _arrays(saved)
        mx.eval(arrays)
        return saved, sum(a.nbytes for a in arrays)

    def load(self, slot: int, saved: list[Any], length: int) -> None:
        """Makes slot `slot` hold a state from `save` of `length` tokens, to be rolled back from there."""
        self.rollback(slot, 0)
        for s, state in zip(self.layers, saved):
            s.load(slot, state, length)
        self.lengths[slot] = length

    def rollback(self, slot: int, keep: int) -> None:
        """Keeps the first `keep` tokens of the slot (`keep` from exact_prefix); 0 resets its states."""
        if keep == 0:
            for s in self.layers:
                s.reset(slot)
        self.lengths[slot] = keep

    def batch(self, rows: list[int], n_new: int, counts: list[int] | None = None, per_token: bool = False) -> list[Any]:
        """The per-layer caches for one forward pass over `rows`, each adding `n_new` tokens.

        `counts[i]`: how many of row i's tokens are real (the rest right-padding); all by default. `per_token`: each
        new token attends as a decode step's row would (a checked draft's logits are then a single step's).
        """
        if any(self.lengths[r] + n_new > self.capacity for r in rows):
            raise ValueError("a slot's KV region is full")
        if n_new == 1:  # a decode pass: kinds that cannot give one token back keep what they had before it
            for s in self.layers:
                s.checkpoint()
        starts = [self.lengths[r] for r in rows]
        layout = PassLayout(rows, starts, n_new, self.capacity, counts or [n_new] * len(rows), self.mask_rank,
                            per_token)
        return [s.pass_cache(layout, self.array_masks) for s in self.layers]

    def commit(self, rows: list[int], counts: list[int]) -> None:
        """Records that a pass stored `counts[i]` more real tokens for slot `rows[i]`.

        A right-padded row stores padding after its real tokens; not counting it leaves it to be
        overwritten, and causal attention never lets a real token see it.
        """
        for r, n in zip(rows, counts):
            self.lengths[r] += n

    def undo(self, slot: int) -> None:
        """Forgets the token the latest decode pass wrote for `slot` (its reply had already ended)."""
        self.lengths[slot] -= 1
        for s in self.layers:
            s.undo(slot)

    def take_from(self, old: "SlotKVStore", slots: list[int]) -> None:
        """Takes slots `slots`' caches from `old` (a store of another plan over the same model) a layer at a time,
        letting each of `old`'s layers go once copied: the two plans' buffers side by side doubled the KV's memory
        (bench --slots 1,8,16 at 16,384 tokens peaked at 1,534 MiB for 720 of KV and 94 of weights). `old` is
        spent, even where this raises (no memory for a layer): its slots are then lost."""
        for i, (mine, theirs) in enumerate(zip(self.layers, old.layers)):
            for slot in slots:
                mine.copy_slot(theirs, slot, old.lengths[slot])
            mx.eval(mine.arrays)
            old.layers[i] = None  # (its buffers go now, not when the whole old store does)
        for slot in slots:
            self.lengths[slot] = old.lengths[slot]


def _arrays(saved: Any) -> list[Any]:
    """The arrays in a saved state (nested lists and tuples, with None for buffers never allocated)."""
    if isinstance(saved, (list, tuple)):
        return [a for part in saved for a in _arrays(part)]
    return [] if saved is None else [saved]


def _mask_rank(model: Any) -> int:
    """The rank of the array masks the model's attention broadcasts against.

    Gemma 2 computes its own scores as (batch, kv heads, repeats, L, keys) when heads are grouped,
    so a per-row mask needs one more axis there than the usual (batch, heads, L, keys).
    """
    args = getattr(model, "args", None)
    if getattr(args, "model_type", None) == "gemma2" and args.num_attention_heads != args.num_key_value_heads:
        return 5
    return 4
