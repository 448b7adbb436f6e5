"""Multimodal RoPE positions per slot (Qwen-VL's mRoPE): each slot rotates its tokens by its own prompt's positions.

Qwen-VL's language models rotate each token by three positions (time, height, width). Text has the three equal; an
image's tokens spread over its grid, so every token after an image sits at its index plus a delta (negative: an image
of N tokens takes fewer than N positions). mlx-vlm keeps one prompt's positions and delta on the language model
(`_position_ids`, `_rope_deltas`), for one sequence at a time; here each slot has its own, from the prompt it reads
(mlx-vlm's `get_rope_index` over it, engine.prefill.images), and every pass gives the model each row's positions.
A prompt's positions cover its whole history, so a slot that keeps or takes a prefix (parked, saved, another slot's)
needs nothing more than its next prompt's: its K/V were rotated by the same positions.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx


_TEXT: tuple[list[list[int]], int] = ([[], [], []], 0)  # a slot's tokens are at their indices


class SlotPositions:
    """The prompt each slot reads (or last read) as far as its positions go: a table for its tokens and the delta
    after them. A slot never given one (a text prompt, a model check) counts its tokens from 0."""

    def __init__(self) -> None:
        self._slots: dict[int, tuple[list[list[int]], int]] = {}

    def place(self, slot: int, positions: tuple[list[list[int]], int] | None) -> None:
        """Slot `slot`'s next prompt's positions (rows time, height, width; and the delta after them), or None for a
        prompt of text only."""
        if positions is None:
            self._slots.pop(slot, None)
        else:
            self._slots[slot] = positions

    def of_pass(self, rows: list[int | None], starts: list[int], n: int) -> mx.array:
        """Position ids (3, B, n) of a pass whose row b adds n tokens to slot rows[b] at starts[b]."""
        out: list[list[list[int]]] = [[], [], []]
        for slot, start in zip(rows, starts):
            table, delta = self._slots.get(slot, _TEXT)  # type: ignore[arg-type]
            inside = table[0][start : start + n]
            after = [start + j + delta for j in range(len(inside), n)]
            for axis in range(3):
                out[axis].append(table[axis][start : start + len(inside)] + after)
        return mx.array(out, dtype=mx.int32)


def rows_of(cache: Any, n_rows: int) -> tuple[list[int | None], list[int]]:
    """Which slots a pass's rows are and where each starts, from its caches (the slots' pass layout; mlx-lm's own
    caches, as in the check at load, are rows of no slot at the cache's offset)."""
    for c in cache or []:
        layout = getattr(c, "layout", None)
        if layout is not None:
            return list(layout.rows), list(layout.starts)
    offset = next((c.offset for c in cache or [] if hasattr(c, "offset")), 0)
    return [None] * n_rows, [int(offset)] * n_rows
