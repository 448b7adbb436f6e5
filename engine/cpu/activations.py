"""exp-based functions (exp, SwiGLU, softmax) that run fast on MLX's CPU backend.

MLX's CPU `exp` evaluates its polynomial one element at a time (about 15 ns per element here,
against 0.4 ns for an add), so `sigmoid`, `silu` and `softmax` cost more than the matmuls around
them once a decode pass has several rows: at 8 rows SmolLM2's SwiGLU took 250 us per layer.
The same polynomial (MLX's own coefficients, within 1.2e-7 of mx.exp) written as one compiled
elementwise kernel costs about 2.5 ns per element.
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx

LOG2_E = 1.442695
# exp(-88) is below float32's normal range: MLX returns 0 there, and 2**-127 built below is 0 too.
LOW, HIGH = -88.0, 88.0
# Below this many elements one mx.softmax call is cheaper than the kernels of the fast one.
SOFTMAX_MIN_ELEMENTS = 4096


@partial(mx.compile, shapeless=True)
def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    """exp(x) as (bits of 2**n as int32, polynomial p): exp(x) = float(bits) * p.

    The int32 -> float32 bit cast cannot be compiled shapeless, so it is left to the caller.
    """
    x = mx.clip(x, LOW, HIGH) * LOG2_E
    n = mx.floor(x + 0.5)
    f = x - n
    p = 1.535336188319500e-4
    p = p * f + 1.339887440266574e-3
    p = p * f + 9.618437357674640e-3
    p = p * f + 5.550332471162809e-2
    p = p * f + 2.402264791363012e-1
    p = p * f + 6.931472028550421e-1
    p = p * f + 1.0
    return mx.left_shift(n.astype(mx.int32) + 127, 23), p


def exp(x: mx.array) -> mx.array:
    """e**x for float32 `x` (0 below -88, finite above 88)."""
    bits, p = _exp_parts(x)
    return bits.view(mx.float32) * p


@partial(mx.compile, shapeless=True)
def _silu_times(gate: mx.array, x: mx.array, exp_bits: mx.array, exp_poly: mx.array) -> mx.array:
    return gate * x / (1.0 + exp_bits * exp_poly)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """silu(gate) * x, as mlx-lm's llama MLP computes it."""
    bits, p = _exp_parts(-gate)
    return _silu_times(gate, x, bits.view(mx.float32), p)


def softmax(scores: mx.array) -> mx.array:
    """Softmax over the last axis, computed in float32 as mx.softmax(precise=True) does."""
    if scores.dtype != mx.float32 or scores.size < SOFTMAX_MIN_ELEMENTS:
        return mx.softmax(scores, axis=-1, precise=True)
    e = exp(scores - mx.max(scores, axis=-1, keepdims=True))
    return e / mx.sum(e, axis=-1, keepdims=True)
