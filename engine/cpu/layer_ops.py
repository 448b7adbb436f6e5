"""A llama layer's RMSNorm, RoPE and SwiGLU as one compiled operation each (kernels/layer_ops.cpp), where they run.

MLX's CPU backend has no kernel of its own for mx.fast.rms_norm and mx.fast.rope: it runs their
fallbacks, about ten and thirty operations each. With two norms and two RoPEs a layer, they were
most of the some 4,000 operations of a SmolLM2 decode step, each with its own scheduling cost.
Other norms and RoPE variants (scaled ones, other dtypes) keep the model's own modules.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from mlxchat.engine.cpu import activations, kernels


def norm(module: Any) -> Callable[[mx.array], mx.array]:
    """`module` itself, or the compiled RMSNorm where it computes the same (nn.RMSNorm, float32 weight)."""
    ext = kernels.status().module
    if ext is None or type(module) is not nn.RMSNorm or module.weight.dtype != mx.float32:
        return module
    weight, eps = module.weight, module.eps
    return lambda x: ext.rms_norm(x, weight, eps) if x.dtype == mx.float32 else module(x)


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

    def __call__(self, rows: mx.array, batch: int, heads: int, offset: int | mx.array, offsets: Callable[[], mx.array]
                 ) -> mx.array:
        """RoPE of `rows` (batch * L, heads * dim), sequence b at positions offset[b]...; `offsets()`: the
        offsets as an int32 array, made once per pass."""
        if self._inverse is not None and rows.dtype == mx.float32:
            return kernels.status().module.rope_rows(
                rows, batch, heads, offsets(), self._inverse, self.module.traditional, self._scale
            )
        x = rows.reshape(batch, rows.shape[0] // batch, heads, -1).transpose(0, 2, 1, 3)
        return self.module(x, offset=offset)
