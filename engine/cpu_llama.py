"""The body of mlx-lm's llama model, run by the engine on the CPU with cheaper activations.

mlx-lm's own layers compute the SwiGLU with mx.exp, which MLX's CPU backend evaluates one
element at a time: at 8 decode rows that cost SmolLM2 7.5 ms a step. The engine runs the same
layers, same weights, with engine.cpu_math's SwiGLU instead. It leaves mlx-lm's model untouched,
so anything else in the process that runs it (mlx-lm's own generators) is unaffected.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.base import create_attention_mask

from engine import cpu_math

LLAMA_MODULE = "mlx_lm.models.llama"


def supports(model: Any) -> bool:
    """Whether `model` is mlx-lm's llama, without sliding-window layers, on the CPU."""
    return (
        mx.default_device().type == mx.cpu
        and type(model).__module__ == LLAMA_MODULE
        and getattr(model.model, "swa_idx", None) is None
    )


def body(model: Any) -> Any:
    """A function (inputs (B, L), caches) -> final hidden states (B, L, D), as `model.model` returns."""
    inner = model.model

    def run(inputs: mx.array, caches: list[Any]) -> mx.array:
        h = inner.embed_tokens(inputs)
        mask = create_attention_mask(h, caches[0])
        for layer, cache in zip(inner.layers, caches):
            h = h + layer.self_attn(layer.input_layernorm(h), mask, cache)
            mlp = layer.mlp
            x = layer.post_attention_layernorm(h)
            h = h + mlp.down_proj(cpu_math.swiglu(mlp.gate_proj(x), mlp.up_proj(x)))
        return inner.norm(h)

    return run
