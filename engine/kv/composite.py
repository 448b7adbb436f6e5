"""Composite layers (mlx-lm's CacheList, e.g. Falcon-H1's recurrent state plus K/V): one store per part."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.kv.layout import PassLayout


class CompositeStore:
    """The stores of a layer whose cache is several caches; every question goes to each part."""

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    @property
    def arrays(self) -> list[Any]:
        return [a for p in self.parts for a in p.arrays]

    def bytes_held(self, length: int) -> int:
        return sum(p.bytes_held(length) for p in self.parts)

    def exact_after_rollback(self, length: int, keep: int) -> bool:
        return all(p.exact_after_rollback(length, keep) for p in self.parts)

    def reset(self, slot: int) -> None:
        for p in self.parts:
            p.reset(slot)

    def checkpoint(self) -> None:
        for p in self.parts:
            p.checkpoint()

    def undo(self, slot: int) -> None:
        for p in self.parts:
            p.undo(slot)

    def copy_slot(self, other: "CompositeStore", slot: int, length: int) -> None:
        for mine, theirs in zip(self.parts, other.parts):
            mine.copy_slot(theirs, slot, length)

    def save(self, slot: int, length: int) -> list[Any]:
        return [p.save(slot, length) for p in self.parts]

    def load(self, slot: int, saved: list[Any], length: int) -> None:
        for part, state in zip(self.parts, saved):
            part.load(slot, state, length)

    def pass_cache(self, layout: PassLayout, array_masks: bool) -> "CompositePass":
        return CompositePass([p.pass_cache(layout, array_masks) for p in self.parts])


class CompositePass:
    """mlx-lm's CacheList protocol: `cache[i]` is the i-th part's pass cache."""

    def __init__(self, caches: list[Any]) -> None:
        self.caches = caches

    def __getitem__(self, i: int) -> Any:
        return self.caches[i]
