"""Where each row of one forward pass stands in its slot: offsets, lengths and the masks every layer shares."""

from __future__ import annotations

from typing import Any

import mlx.core as mx


class PassLayout:
    """Row/offset bookkeeping of one forward pass, shared by all layers' caches.

    Row b adds `n_new` tokens at positions starts[b]..starts[b] + n_new - 1; only the first
    `counts[b]` of them are real (a right-padded prefill row stores padding after them).
    """

    def __init__(
        self, rows: list[int], starts: list[int], n_new: int, capacity: int, counts: list[int], mask_rank: int = 4,
        per_token: bool = False,
    ) -> None:
        self.rows = rows
        self.starts = starts
        self.n_new = n_new
        self.counts = counts
        self.lengths = [s + n_new for s in starts]
        # RoPE wants one offset per row; a single row can use a plain int (faster path).
        self.offset: int | mx.array = starts[0] if len(rows) == 1 else mx.array(starts)
        self.capacity = capacity
        self.padded = any(c != n_new for c in counts)
        self.mask_rank = mask_rank
        # Each new token attends as a row of its own over the keys up to it (`token_rows`), as a decode step does.
        self.per_token = per_token and n_new > 1
        self._scatter_index: mx.array | None = None
        self._valid: mx.array | None = None
        self._masks: dict[tuple, Any] = {}

    def scatter_index(self, heads: int, capacity: int) -> mx.array:
        """Flat (slot, head, position) indices of each row's new token, for one scatter per layer."""
        if self._scatter_index is None:
            rows = mx.array(self.rows)[:, None]
            starts = mx.array(self.starts)[:, None]
            self._scatter_index = (rows * heads + mx.arange(heads)[None]) * capacity + starts
        return self._scatter_index

    def slot_arrays(self, part: slice) -> tuple[mx.array, mx.array]:
        """The slots and lengths of rows `part` as int32 arrays, made once for all layers."""
        key = ("slots", part.start, part.stop)
        if key not in self._masks:
            self._masks[key] = mx.array(self.rows[part], mx.int32), mx.array(self.lengths[part], mx.int32)
        return self._masks[key]

    def token_rows(self, part: slice) -> tuple[list[int], list[int], mx.array, tuple[mx.array, mx.array]]:
        """Rows `part` with each new token a row of its own: their slots, lengths (the keys up to each token),
        valid mask (rows, 1, 1, longest) and the two as int32 arrays, made once for all layers."""
        key = ("tokens", part.start, part.stop)
        if key not in self._masks:
            slots, positions = self.token_positions(part)
            lengths = [p + 1 for p in positions]
            valid = (mx.arange(max(lengths))[None] < mx.array(lengths)[:, None])[:, None, None, :]
            self._masks[key] = slots, lengths, valid, (mx.array(slots, mx.int32), mx.array(lengths, mx.int32))
        return self._masks[key]

    def token_positions(self, part: slice = slice(None)) -> tuple[list[int], list[int]]:
        """Each new token of rows `part` as a row of its own: its slot and its position there."""
        return ([r for r in self.rows[part] for _ in range(self.n_new)],
                [s + i for s in self.starts[part] for i in range(self.n_new)])

    def offsets(self) -> mx.array:
        """Each row's start as an int32 array (B,), made once for all layers."""
        key = ("offsets",)
        if key not in self._masks:
            self._masks[key] = mx.array(self.starts, mx.int32)
        return self._masks[key]

    def valid(self) -> mx.array:
        """(rows, 1, 1, longest) mask of each row's own tokens, made once for all layers."""
        if self._valid is None:
            longest = max(self.lengths)
            self._valid = (mx.arange(longest)[None] < mx.array(self.lengths)[:, None])[:, None, None, :]
        return self._valid

    def made_valid(self, mask: object) -> bool:
        """Whether `mask` is this pass's own `valid()` mask (which per-slot attention does not need)."""
        return mask is self._valid

    def causal_mask(self, window: int | None) -> mx.array:
        """(rows, 1, n_new, longest) boolean mask over each row's region, causal and window-aware.

        The query at position p sees the keys at p - window < k <= p (all k <= p without a window):
        mlx-lm's `create_causal_mask` for each row at its own offset, with padding beyond it hidden.
        """
        key = ("full", window)
        if key not in self._masks:
            keys = mx.arange(max(self.lengths))[None, None, :]
            queries = (mx.array(self.starts)[:, None] + mx.arange(self.n_new)[None])[:, :, None]
            mask = keys <= queries
            if window is not None:
                mask = mask & (keys > queries - window)
            self._masks[key] = self._ranked(mask)
        return self._masks[key]

    def ring_mask(self, size: int, window: int) -> mx.array:
        """(rows, 1, n_new, size + n_new) mask for a window ring of `size` followed by the pass's new keys.

        Ring entry j of a row holds position p = start - 1 - ((start - 1 - j) mod size), when p >= 0:
        the latest position before the pass that the ring stored there.
        """
        key = ("ring", size, window)
        if key not in self._masks:
            starts = mx.array(self.starts)[:, None]
            j = mx.arange(size)[None]
            ring_pos = starts - 1 - mx.remainder(starts - 1 - j, size)
            new_pos = starts + mx.arange(self.n_new)[None]
            positions = mx.concatenate([ring_pos, new_pos], axis=1)[:, None, :]
            queries = new_pos[:, :, None]
            mask = (positions >= 0) & (positions <= queries) & (positions > queries - window)
            self._masks[key] = self._ranked(mask)
        return self._masks[key]

    def ring_decode_mask(self, size: int, window: int) -> mx.array:
        """(rows, 1, 1, size) mask over a window ring after each row's one new token was written into it.

        Ring entry j then holds position start - ((start - j) mod size), when that is >= 0.
        """
        key = ("ring-decode", size, window)
        if key not in self._masks:
            starts = mx.array(self.starts)[:, None]
            positions = starts - mx.remainder(starts - mx.arange(size)[None], size)
            mask = (positions >= 0) & (positions > starts - window)
            self._masks[key] = self._ranked(mask[:, None, :])
        return self._masks[key]

    def _ranked(self, mask: mx.array) -> mx.array:
        """(rows, n_new, keys) with the head axes the model's scores have, each of size 1."""
        return mask.reshape(mask.shape[0], *([1] * (self.mask_rank - 3)), *mask.shape[1:])
