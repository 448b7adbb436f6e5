"""Attention over slot regions: each row reads only its own slot's tokens (split-KV, as llama.cpp #14363).

mlx-lm's attention layers call `scaled_dot_product_attention(q, k, v, cache=..., ...)` from
`mlx_lm.models.base`; `install` swaps that name in the model's module for a dispatcher that
hands slot caches to `attend_per_slot` and everything else to mlx-lm unchanged.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any, Callable

import mlx.core as mx
from mlx_lm.models.base import quantized_scaled_dot_product_attention

from mlxchat.engine.cpu.attention import attention_for_device, kernel_attention
from mlxchat.engine.devices import device_kind
from mlxchat.engine.kv.kv_types import BITS, KVType, StoredKV, q8_group

# Padding the rows to the longest costs (rows x longest); going row by row costs the sum of
# the lengths plus one small attention call per row. Batch when padding wastes less than this.
PAD_WASTE_LIMIT = 1.5


def attend_per_slot(
    queries: mx.array,
    keys: StoredKV,
    values: StoredKV,
    rows: list[int],
    lengths: list[int],
    *,
    kv_type: KVType,
    valid: Callable[[], mx.array],
    scale: float,
    sinks: mx.array | None = None,
    slot_arrays: Callable[[], tuple[mx.array, mx.array]] | None = None,
) -> mx.array:
    """Attention for `queries` (B, heads, L, dim), row b over keys[rows[b], :, :lengths[b]], K/V as stored in
    `kv_type` (read as stored by the kernel and mlx-lm's quantized attention, else widened to the queries' dtype).

    The L new tokens are the last L of each row, so causality is the usual bottom-right one.
    `valid()` gives the (B, 1, 1, longest) mask of each row's tokens when rows are padded.
    Rows of neighbouring slots with similar lengths share one call over a view of their
    regions; K/V are never copied. The compiled kernel, where it runs, serves every row in one call;
    `slot_arrays()` gives it `rows` and `lengths` as arrays made once per pass.
    """
    if sinks is None:
        out = kernel_attention(queries, keys.parts, values.parts, rows, lengths, scale, slot_arrays)
        if out is not None:
            return out
    n_new = queries.shape[2]
    attention = attention_for_device()
    outs = []
    for lo, hi in _groups(rows, lengths, n_new):
        longest = max(lengths[lo:hi])
        first = rows[lo]
        mask: Any = "causal" if n_new > 1 else None
        if hi - lo > 1 and len(set(lengths[lo:hi])) > 1:
            mask = valid()[lo:hi, :, :, :longest]
        k, v = keys[first : first + hi - lo, :, :longest], values[first : first + hi - lo, :, :longest]
        if kv_type.quantized and sinks is None:
            group = q8_group(k.parts[0].shape[-1] * 4)
            k, v = _whole(k), _whole(v)
            outs.append(quantized_scaled_dot_product_attention(queries[lo:hi], k.parts, v.parts, scale, mask, group,
                                                               BITS))
            continue
        k, v = kv_type.decode(k, queries.dtype), kv_type.decode(v, queries.dtype)
        outs.append(attention(queries[lo:hi], k, v, scale=scale, mask=mask, sinks=sinks))
    return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)


@cache
def q8_unreadable(head_dim: int) -> str | None:
    """Why this device cannot read q8 K/V of `head_dim`-value heads, or None. Tried once per size on arrays as the
    slots pass them (two rows of a shared buffer, GQA, 1, 4 and 16 new tokens): MLX's CUDA quantized_matmul has
    no kernel for some shapes (32-value heads on an H200) and says so only when run."""
    kv_type = KVType("q8")
    buffer = kv_type.encode(mx.ones((2, 1, 32, head_dim)))
    try:
        for n_new in (1, 4, 16):
            queries = mx.ones((2, 2, n_new, head_dim))
            mx.eval(attend_per_slot(queries, buffer, buffer, [0, 1], [24, 24], kv_type=kv_type,
                                    valid=lambda: mx.ones((2, 1, 1, 24), dtype=mx.bool_), scale=1.0))
    except RuntimeError as e:
        return str(e)
    return None


def _whole(stored: StoredKV) -> StoredKV:
    """`stored` as MLX's quantized_matmul can read it here: on CUDA only a whole contiguous array (a view of the
    slots' first tokens is refused: "No implementation for problem shape"), so a copy of the view; elsewhere
    the view itself."""
    return stored.map(mx.contiguous) if _on_cuda() else stored


@cache
def _on_cuda() -> bool:
    return device_kind() == "cuda"


def _groups(rows: list[int], lengths: list[int], n_new: int) -> list[tuple[int, int]]:
    """Splits the rows into runs [lo, hi) that one attention call can serve.

    A run holds neighbouring slots (a view of the buffer) and, padded to its longest row, wastes
    at most PAD_WASTE_LIMIT of its work; a prefill row (n_new > 1) is always a run of its own.
    One walk, the run's longest and total kept as it grows: every layer of every pass calls this
    (re-summing each run made it quadratic, 0.4 ms a layer at 64 rows).
    """
    groups: list[tuple[int, int]] = []
    lo, longest, total = 0, lengths[0], lengths[0]
    for i in range(1, len(rows)):
        if n_new == 1 and rows[i] == rows[i - 1] + 1:
            grown_longest, grown_total = max(longest, lengths[i]), total + lengths[i]
            if grown_longest * (i - lo + 1) <= PAD_WASTE_LIMIT * grown_total:
                longest, total = grown_longest, grown_total
                continue
        groups.append((lo, i))
        lo, longest, total = i, lengths[i], lengths[i]
    groups.append((lo, len(rows)))
    return groups


def rows_upto(buffer: StoredKV, rows: list[int], length: int, kv_type: KVType, dtype: mx.Dtype) -> mx.array:
    """buffer[rows, :, :length] widened to `dtype`: of a view when the rows are a run of slots, else of a copy of
    just that part."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        part = buffer[rows[0] : rows[0] + len(rows), :, :length]
    else:
        part = buffer[:, :, :length].map(lambda a: mx.take(a, mx.array(rows), axis=0))
    return kv_type.decode(part, dtype)


def _dispatching(original: Any) -> Any:
    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        # An array mask the cache did not make for itself (MLA's scores, a window) must be applied as given.
        if hasattr(cache, "attend") and cache.plain_mask(mask):
            return cache.attend(queries, scale, sinks)
        return original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention.slot_dispatch = True  # type: ignore[attr-defined]
    return scaled_dot_product_attention


def install(model: Any) -> bool:
    """Routes the model's attention through the slot dispatcher; False if the model does not use it.

    Models that call mx.fast directly still work: the slot cache then hands them padded K/V.
    """
    from mlx_lm.models import base

    # (a vision model's language model names its own module: engine.loading.vision.SlotModel)
    module = sys.modules[getattr(model, "attention_module", None) or type(model).__module__]
    current = getattr(module, "scaled_dot_product_attention", None)
    if current is None:
        return False
    if not getattr(current, "slot_dispatch", False):
        module.scaled_dot_product_attention = _dispatching(base.scaled_dot_product_attention)
    return True
