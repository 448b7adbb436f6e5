"""A decode pass's decoder layers as one compiled operation (kernels/layer_stack.cpp): a llama's layers kept as
stored, each as its q, k and v matmul with the RoPE, the K/V writes, attention, o, the residual add and norm, the
gate and up matmul with the SwiGLU, down and the next add and norm would run them one operation each, the same
bits, in one operation of the step's graph instead of some three hundred (each costs the engine's thread and MLX's
stream thread a few microseconds).

It serves passes whose every token attends as a decode row of its own (decode steps, and the checking passes of
speculative decoding) where every layer's K/V is one float buffer; any other pass takes the layers one operation each. The K/V are written in the slots' buffers in place, which the layers'
caches then hold as the operation's outputs (engine.kv.full.FullAttentionPass.stack_buffers, stack_wrote).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.engine.cpu import kernels, layer_ops


class LayerStack:
    """The stack's weights for one model, checked and handed to the kernel once: each layer's norms, RoPE and
    weights (a pass then passes only its rows, the K/V buffers and how each call multiplies)."""

    def __init__(self, inner: Any, calls: list[list[Any]], norms: list[tuple[mx.array, float]],
                 turns: list[tuple[mx.array, bool, float]]) -> None:
        """`calls`: each layer's q/k/v, o, gate/up and down stored.Call; `norms`: (weight, eps) of the first norm, then
        each layer's after attention and after its MLP; `turns`: each layer's RoPE (inverse, traditional, scale)."""
        attn = inner.layers[0].self_attn
        self._calls = [call for layer in calls for call in layer]
        held = [norms[0][0]]
        for i, (turn, layer) in enumerate(zip(turns, calls)):
            held += [norms[1 + 2 * i][0], norms[2 + 2 * i][0], turn[0], *(w for c in layer for w in c.stack_arrays())]
        # The kernel holds them as they are: evaluated, in row order (contiguous() shares an array already so).
        first, *arrays = [mx.contiguous(a) for a in held]
        mx.eval(first, arrays)
        self._weights = kernels.status().module.layer_stack_weights(
            first, arrays, attn.n_heads, attn.n_kv_heads, attn.head_dim, norms[0][1], attn.scale, *turns[0][1:],
            [n for call in self._calls for n in call.stack_format()])

    @classmethod
    def of(cls, inner: Any, layers: list[Any], ropes: list[Any]) -> LayerStack | None:
        """The stack for a llama's layers (engine.cpu.llama's stored layers and RoPEs), or None where it cannot
        run them: the kernels not built, a layer whose calls are not fused or add biases, norms the kernel does not
        compute, RoPEs or norms' eps unlike from layer to layer."""
        if kernels.status().module is None:
            return None
        calls = [layer.stack_calls() for layer in layers]
        modules = [inner.layers[0].input_layernorm]
        for i, layer in enumerate(inner.layers):
            after = inner.layers[i + 1].input_layernorm if i + 1 < len(inner.layers) else inner.norm
            modules += [layer.post_attention_layernorm, after]
        norms = [layer_ops.norm_weight(m) for m in modules]
        turns = [rope.epilogue() for rope in ropes]
        if (any(c is None for c in calls) or any(n is None for n in norms) or any(t is None for t in turns)
                or len({n[1] for n in norms if n}) != 1 or len({t[1:] for t in turns if t}) != 1):
            return None
        return cls(inner, calls, norms, turns)  # type: ignore[arg-type]

    def __call__(self, h: mx.array, groups: list[list[Any]]) -> mx.array | None:
        """The final norm's output for a pass's embedded tokens h (tokens, hidden) over each group's layer caches,
        the K/V written in their buffers; None where h is not float32 (weights_dtype "keep": half-precision
        embeddings), a group's tokens do not each attend as a decode row (a prompt's chunk), or a cache is not one
        float buffer (then the layers go one operation each). A checking pass's chunks (engine.speculation.verify)
        qualify: each token is a row of its own at its position, as the decode steps it stands for."""
        buffers = [getattr(cache, "stack_buffers", lambda: None)() for caches in groups for cache in caches]
        if h.dtype != mx.float32 or any(pair is None for pair in buffers):
            return None
        slots: list[int] = []
        positions: list[int] = []
        for caches in groups:
            s, p = caches[0].layout.token_positions()
            slots += s
            positions += p
        layers = len(groups[0])
        normed, *written = kernels.status().module.layer_stack(
            h, mx.array(slots, mx.int32), mx.array(positions, mx.int32), self._weights,
            [a for pair in buffers[:layers] for a in pair],  # type: ignore[union-attr]
            # Read at every call: whether a call rounds its rows to int8 can change after the stack was made.
            [call.int8 for call in self._calls], kernels.THREADS)
        for cache, i in zip(groups[0], range(0, len(written), 2)):  # (every group's caches share the layers' stores)
            cache.stack_wrote(written[i], written[i + 1])
        return normed
