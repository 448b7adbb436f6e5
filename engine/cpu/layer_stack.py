"""A decode pass's decoder layers as one compiled operation (kernels/layer_stack.cpp): a llama's layers kept as
stored, each as its q, k and v matmul with the RoPE, the K/V writes, attention, o, the residual add and norm, the
gate and up matmul with the SwiGLU, down and the next add and norm would run them one operation each, the same
bits, in one operation of the step's graph instead of some three hundred (each costs the engine's thread and MLX's
stream thread a few microseconds).

It serves passes of one token a row in one group (decode steps) where every layer's K/V is one float buffer; any
other pass takes the layers one operation each.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.engine.cpu import kernels, layer_ops
from mlxchat.engine.cpu.attention import KERNEL_DTYPES


class LayerStack:
    """The stack's arrays for one model, gathered once: each layer's norms, RoPE and weights."""

    def __init__(self, inner: Any, parts: list[list[tuple[list[mx.array], list[int]]]], ropes: list[Any]) -> None:
        """(LayerStack.of checks that every norm, RoPE and call serves.)"""
        layers = inner.layers
        attn = layers[0].self_attn
        first, eps = layer_ops.norm_weight(layers[0].input_layernorm)  # type: ignore[misc]
        nexts = [layer.input_layernorm for layer in layers[1:]] + [inner.norm]
        turns = [rope.epilogue() for rope in ropes]
        self._first, self._eps = first, eps
        self._shape = (attn.n_heads, attn.n_kv_heads, attn.head_dim)
        self._scale = attn.scale
        self._rope = turns[0][1:]  # (traditional, scale): alike in every layer
        self._formats = [n for layer in parts for _, format in layer for n in format]
        # Each layer's arrays before its K and V buffers (its two norms' weights, its inverse frequencies), and after.
        self._before = [[layer_ops.norm_weight(layer.post_attention_layernorm)[0],  # type: ignore[index]
                         layer_ops.norm_weight(after)[0], turn[0]]  # type: ignore[index]
                        for layer, after, turn in zip(layers, nexts, turns)]
        self._after = [[array for arrays, _ in layer for array in arrays] for layer in parts]

    @classmethod
    def of(cls, inner: Any, layers: list[Any], ropes: list[Any]) -> LayerStack | None:
        """The stack for a llama's layers (engine.cpu.llama's stored layers and RoPEs), or None where it cannot
        run them: the kernels not built, a layer whose calls are not fused or add biases, norms the kernel does not
        compute, RoPEs or norms' eps unlike from layer to layer."""
        if kernels.status().module is None:
            return None
        parts = [layer.stack_parts() if hasattr(layer, "stack_parts") else None for layer in layers]
        modules = [m for layer in inner.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]
        norms = [layer_ops.norm_weight(m) for m in modules + [inner.norm]]
        turns = [rope.epilogue() for rope in ropes]
        if (any(p is None for p in parts) or any(n is None for n in norms) or any(t is None for t in turns)
                or len({n[1] for n in norms if n}) != 1 or len({t[1:] for t in turns if t}) != 1):
            return None
        return cls(inner, parts, ropes)  # type: ignore[arg-type]

    def __call__(self, h: mx.array, caches: list[Any]) -> mx.array | None:
        """The final norm's output for a decode pass's embedded tokens h (rows, hidden) over the layers' `caches`,
        the K/V written in their buffers; None where a cache is not one float buffer (then the layers go one
        operation each)."""
        buffers = []
        for cache in caches:
            kv = getattr(cache, "stack_buffers", None)
            pair = kv() if kv else None
            if pair is None:
                return None
            buffers.append(pair)
        lay = caches[0].layout
        arrays = [a for before, (k, v), after in zip(self._before, buffers, self._after) for a in (*before, k, v, *after)]
        heads, kv_heads, head_dim = self._shape
        return kernels.status().module.layer_stack(
            h, lay.slot_arrays(slice(None))[0], lay.offsets(), self._first, arrays, heads, kv_heads, head_dim,
            self._eps, self._scale, *self._rope, kernels.THREADS, self._formats)


def float_buffers(keys: Any, values: Any) -> tuple[mx.array, mx.array] | None:
    """K and V's buffers where each is one array of a type the stack writes (engine.kv: StoredKV), else None."""
    if keys is None or values is None or len(keys.parts) != 1 or len(values.parts) != 1:
        return None
    k, v = keys.parts[0], values.parts[0]
    return (k, v) if k.dtype in KERNEL_DTYPES and v.dtype == k.dtype else None
