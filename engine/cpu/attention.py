"""Attention on MLX's CPU backend: the compiled kernel where it runs, else two matmuls and a softmax
(which beat MLX's fused SDPA fallback there)."""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx

from mlxchat.engine.cpu import activations, kernels

# Below this many multiply-adds (query-key products times the head size) a second thread costs more
# than it saves. Decode rows are worth it early: they read their keys and values from memory, not
# cache (8 rows at 100 tokens: 317 us on one thread inside a SmolLM2 step, 83 us on two in isolation).
# One chat's row from about 110 tokens on: a SmolLM2 step at one slot took 13.0-13.3 ms with two threads
# against 13.3-13.6 with one from 256 on (three runs each, Xeon, 2 cores).
THREADED_WORK = 1 << 16
# The float types the kernel reads K/V in (8-bit K/V's scales and biases: float32 only).
KERNEL_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def kernel_attention(
    queries: mx.array,
    keys: tuple[mx.array, ...],
    values: tuple[mx.array, ...],
    rows: list[int],
    lengths: list[int],
    scale: float,
    slot_arrays: Callable[[], tuple[mx.array, mx.array]] | None = None,
) -> mx.array | None:
    """Attention of row b's queries over the first lengths[b] tokens of slot rows[b] of the K/V buffers
    (slots, kv_heads, capacity, dim) as stored (engine.kv.kv_types: one array, or 8-bit values, scales and
    biases), by the compiled kernel; None where it cannot run (not built, queries or scales not float32, not
    on the CPU), for the caller to use MLX's own operations. `slot_arrays()`: rows and lengths as int32
    arrays, where the caller keeps them."""
    if not kernels.active_here() or queries.dtype != mx.float32 or keys[-1].dtype not in (
        KERNEL_DTYPES if len(keys) == 1 else (mx.float32,)
    ):
        return None
    ext = kernels.status().module
    b, heads, n, dim = queries.shape
    work = heads * n * sum(lengths) * dim
    threads = kernels.THREADS if work >= THREADED_WORK else 1
    row_array, length_array = slot_arrays() if slot_arrays else (mx.array(rows), mx.array(lengths))
    return ext.slot_attention(queries, list(keys), list(values), row_array, length_array, scale, threads)


def kernel_kv_write(
    keys: tuple[mx.array, ...], values: tuple[mx.array, ...], new_keys: mx.array, new_values: mx.array, at: mx.array
) -> tuple[mx.array, mx.array] | None:
    """The K/V buffers (one array each) with the decode rows `at` (B, heads) set to the new (B, heads, 1, dim) K/V,
    rounded to the buffers' type, by the compiled kernel: one operation, in place; None where it cannot run (not
    built, not on the CPU, K/V not float32, a buffer stored in parts), for the caller to scatter with MLX."""
    if (not kernels.active_here() or len(keys) != 1 or len(values) != 1 or new_keys.dtype != mx.float32
            or new_values.dtype != mx.float32 or keys[0].dtype not in KERNEL_DTYPES):
        return None
    ext = kernels.status().module
    return ext.kv_write(keys[0], new_keys, at), ext.kv_write(values[0], new_values, at)


def matmul_attention(
    queries: mx.array, keys: mx.array, values: mx.array, *, scale: float, mask: Any = None, sinks: Any = None
) -> mx.array:
    """Attention as two matmuls and a softmax: on MLX's CPU backend this beats its fused SDPA
    fallback at decode shapes (about 280 vs 450 us per layer for 8 short rows)."""
    if sinks is not None:
        return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask, sinks=sinks)
    b, heads, n, dim = queries.shape
    kv_heads = keys.shape[1]
    # Grouped-query attention: each K/V head serves heads // kv_heads query heads.
    q = (queries * scale).reshape(b, kv_heads, (heads // kv_heads) * n, dim)
    scores = q @ keys.swapaxes(-1, -2)
    if isinstance(mask, str):  # "causal": the n new tokens are the last n of the keys
        total = keys.shape[2]
        causal = mx.arange(total - n, total)[:, None] >= mx.arange(total)[None]
        mask = mx.tile(causal, (heads // kv_heads, 1))
    if mask is not None:
        scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
    weights = activations.softmax(scores)
    return (weights @ values).reshape(b, heads, n, values.shape[-1])


def attention_for_device() -> Callable[..., mx.array]:
    """The attention function for MLX's default device: matmul attention on the CPU, the fused SDPA elsewhere."""
    return matmul_attention if mx.default_device().type == mx.cpu else mx.fast.scaled_dot_product_attention
