"""mlx-lm's llama model, run by the engine on the CPU: matmuls split across two cores, cheaper activations.

Two of mlx-lm's costs on the CPU grow with the rows of a decode pass, and the engine runs the
same layers, same weights, its own way to cut them:

- OpenBLAS's own threads speed up a one-row matmul (a gemv) but not an 8-row one: SmolLM2's
  matmuls took 46 ms at 1 row and 74 ms at 8 with 2 threads, 77 and 81 with 1. Here each
  matmul's output rows are split in two halves, computed at once on two MLX CPU streams (each
  stream is a thread) by a single-threaded BLAS: 52 ms at 1 row, 56 at 8. `cores` holds the
  BLAS at one thread while the engine works and gives its threads back when it is idle.
- the SwiGLU's exp, which MLX's CPU backend evaluates one element at a time (engine.cpu_math).

mlx-lm's model is left untouched, so anything else in the process that runs it (mlx-lm's own
generators) is unaffected.
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from engine import cpu_math
from engine.blas import SingleThreadedBlas

LLAMA_MODULE = "mlx_lm.models.llama"


def supports(model: Any, head: Any) -> bool:
    """Whether `model` is mlx-lm's llama with float weights, without sliding-window layers, on the CPU.

    `head` is the module whose weight gives the logits (lm_head or the tied embedding).
    """
    if mx.default_device().type != mx.cpu or type(model).__module__ != LLAMA_MODULE:
        return False
    layer = model.model.layers[0]
    linear = (layer.self_attn.q_proj, layer.mlp.gate_proj)
    return (
        getattr(model.model, "swa_idx", None) is None
        and all(type(m) is nn.Linear for m in linear)
        and type(head) in (nn.Linear, nn.Embedding)
    )


class _Split:
    """One weight matrix (out, in) as two halves of its output rows: views, no copies."""

    def __init__(self, weight: mx.array, bias: mx.array | None = None) -> None:
        half = weight.shape[0] // 2
        self.halves = (weight[:half], weight[half:])
        self.bias = bias
        mx.eval(self.halves)


class CpuLlama:
    """The model's body (inputs, caches) -> final hidden states, and its head, run split across two cores."""

    def __init__(self, model: Any, head: Any) -> None:
        self.inner = model.model
        self.attention = sys.modules[LLAMA_MODULE].scaled_dot_product_attention
        self.cores = SingleThreadedBlas()
        self._other: mx.Stream | None = None
        self._head = _Split(head.weight)
        self._o = [_linear_split(layer.self_attn.o_proj) for layer in self.inner.layers]
        self._down = [_linear_split(layer.mlp.down_proj) for layer in self.inner.layers]

    def body(self, inputs: mx.array, caches: list[Any]) -> mx.array:
        """What `model.model(inputs, caches)` returns."""
        if self._other is None:
            # Made on the engine thread, which owns every MLX stream it uses.
            self._other = mx.new_stream(mx.cpu)
        inner = self.inner
        h = inner.embed_tokens(inputs)
        mask = caches[0].make_mask(h.shape[1])
        for i, (layer, cache) in enumerate(zip(inner.layers, caches)):
            h = h + self._attend(layer.self_attn, layer.input_layernorm(h), mask, cache, self._o[i])
            mlp = layer.mlp
            x = layer.post_attention_layernorm(h)
            gate = mlp.gate_proj(x)
            with mx.stream(self._other):
                up = mlp.up_proj(x)
            h = h + self._matmul(cpu_math.swiglu(gate, up), self._down[i])
        return inner.norm(h)

    def head(self, states: mx.array) -> mx.array:
        """Logits for final hidden states."""
        return self._matmul(states, self._head)

    def _attend(self, attn: Any, x: mx.array, mask: Any, cache: Any, o_proj: _Split) -> mx.array:
        b, n, _ = x.shape
        queries = attn.q_proj(x).reshape(b, n, attn.n_heads, -1).transpose(0, 2, 1, 3)
        queries = attn.rope(queries, offset=cache.offset)
        with mx.stream(self._other):
            keys = attn.k_proj(x).reshape(b, n, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
            values = attn.v_proj(x).reshape(b, n, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
            keys = attn.rope(keys, offset=cache.offset)
        keys, values = cache.update_and_fetch(keys, values)
        out = self.attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
        return self._matmul(out.transpose(0, 2, 1, 3).reshape(b, n, -1), o_proj)

    def _matmul(self, x: mx.array, w: _Split) -> mx.array:
        """x @ weight.T (+ bias), each half of the output on its own stream."""
        first, second = w.halves
        y1 = x @ first.T
        with mx.stream(self._other):
            y2 = x @ second.T
        y = mx.concatenate([y1, y2], axis=-1)
        return y if w.bias is None else y + w.bias


def _linear_split(linear: nn.Linear) -> _Split:
    return _Split(linear.weight, linear.get("bias"))
