"""A llama layer's RMSNorm, RoPE and SwiGLU as one compiled operation each (kernels/layer_ops.cpp), where they run.

MLX's CPU backend has no kernel of its own for mx.fast.rms_norm and mx.fast.rope: it runs their
fallbacks, about ten and thirty operations each. With two norms and two RoPEs a layer, they were
most of the some 4,000 operations of a SmolLM2 decode step, each with its own scheduling cost.
Other norms and RoPE variants (scaled ones, other dtypes) keep the model's own modules. Where a llama layer's
weights are kept as stored, the RoPE of a pass of one group (a decode step, or a prompt's chunk alone) runs inside
the q, k and v matmul's operation instead (`Rope.epilogue`; engine.cpu.llama).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from mlxchat.engine.cpu import activations, kernels


def norm(module: Any) -> Callable[[mx.array], mx.array]:
    """`module` itself, or the compiled RMSNorm where it computes the same (nn.RMSNorm, float32 weight)."""
    compiled = _compiled_norm(module)
    if compiled is None:
        return module
    ext, weight, eps = compiled
    return lambda x: ext.rms_norm(x, weight, eps) if x.dtype == mx.float32 else module(x)


def add_norm(module: Any) -> Callable[[mx.array, mx.array], tuple[mx.array, mx.array]]:
    """(h, delta) -> (h + delta, module(h + delta)): a layer's residual add and the next norm, one compiled operation
    where `norm` would compile the norm (one fewer in each of the two per layer of every step's graph)."""
    compiled = _compiled_norm(module)

    def apart(h: mx.array, delta: mx.array) -> tuple[mx.array, mx.array]:
        h = h + delta
        return h, module(h)

    if compiled is None:
        return apart
    ext, weight, eps = compiled

    def fused(h: mx.array, delta: mx.array) -> tuple[mx.array, mx.array]:
        if h.dtype != mx.float32 or delta.dtype != mx.float32 or h.shape != delta.shape:
            return apart(h, delta)
        total, normed = ext.add_rms_norm(h, delta, weight, eps)
        return total, normed

    return fused


def norm_weight(module: Any) -> tuple[mx.array, float] | None:
    """(weight, eps) where the compiled RMSNorm computes what `module` does, else None."""
    compiled = _compiled_norm(module)
    return None if compiled is None else compiled[1:]


def _compiled_norm(module: Any) -> tuple[Any, mx.array, float] | None:
    """(the kernels' module, weight, eps) where the compiled RMSNorm computes what `module` does, else None."""
    ext = kernels.status().module
    if ext is None or type(module) is not nn.RMSNorm or module.weight.dtype != mx.float32:
        return None
    return ext, module.weight, module.eps


def swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up: one compiled operation where the kernels run (activations.swiglu is about eight)."""
    ext = kernels.status().module
    if ext is None or gate.dtype != mx.float32 or up.dtype != mx.float32:
        return activations.swiglu(gate, up)
    return ext.swiglu(gate, up)


class Rope:
    """A layer's RoPE over a pass's rows (tokens, heads * dim) -> (B, heads, L, dim): compiled where the
    module is mlx's nn.RoPE or mlx-lm's Llama3RoPE, else the module on the reshaped rows."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self._inverse: mx.array | None = None
        self._scale = 1.0
        if kernels.status().module is None:
            return
        from mlx_lm.models.rope_utils import Llama3RoPE

        if type(module) is nn.RoPE and module.base is not None:
            # The frequencies as mx.fast.rope makes them from its base.
            half = module.dims // 2
            self._inverse = mx.exp(mx.arange(0.0, -half, -1.0) * (math.log(module.base) / half))
            self._scale = module.scale
        elif type(module) is Llama3RoPE:
            self._inverse = mx.reciprocal(module._freqs.astype(mx.float32))
        if self._inverse is not None:
            mx.eval(self._inverse)

    def epilogue(self) -> tuple[mx.array, bool, float] | None:
        """(inverse frequencies, traditional, scale) where the compiled RoPE serves, for a matmul that turns its own
        products (stored.Call.rows_rope); else None."""
        return None if self._inverse is None else (self._inverse, self.module.traditional, self._scale)

    def __call__(self, rows: list[mx.array], batch: int, heads: list[int], offset: int | mx.array,
                 offsets: Callable[[], mx.array]) -> list[mx.array]:
        """RoPE of each `rows[i]` (batch * L, heads[i] * dim) -> (batch, heads[i], L, dim), sequence b at positions
        offset[b]...; `offsets()`: the offsets as an int32 array, made once per pass. Compiled, all of them (a
        layer's queries and keys) are one operation."""
        if self._inverse is not None and all(x.dtype == mx.float32 for x in rows):
            return kernels.status().module.rope_rows(
                rows, batch, heads, offsets(), self._inverse, self.module.traditional, self._scale
            )
        return [self.module(as_heads(x, batch, n), offset=offset) for x, n in zip(rows, heads)]


def as_heads(rows: mx.array, batch: int, heads: int) -> mx.array:
    """Rows (batch * L, heads * dim) as (batch, heads, L, dim): for one token a sequence, a reshape alone."""
    length = rows.shape[0] // batch
    if length == 1:
        return rows.reshape(batch, heads, 1, -1)
    return rows.reshape(batch, length, heads, -1).transpose(0, 2, 1, 3)


def as_rows(x: mx.array) -> mx.array:
    """(batch, heads, L, dim) as rows (batch * L, heads * dim): as_heads undone."""
    batch, heads, length, dim = x.shape
    if length == 1:
        return x.reshape(batch, heads * dim)
    return x.transpose(0, 2, 1, 3).reshape(batch * length, heads * dim)
