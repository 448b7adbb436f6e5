"""mlx-lm's llama model, run by the engine on the CPU: matmuls split across two cores, cheaper activations.

Two of mlx-lm's costs on the CPU grow with the rows of a decode pass, and the engine runs the
same layers, same weights, its own way to cut them:

- OpenBLAS's own threads speed up a one-row matmul (a gemv) but not an 8-row one: SmolLM2's
  matmuls took 46 ms at 1 row and 74 ms at 8 with 2 threads, 77 and 81 with 1. Here each
  matmul's output rows are split in two halves, computed at once on two MLX CPU streams (each
  stream is a thread) by a single-threaded BLAS: 52 ms at 1 row, 56 at 8. `cores` holds the
  BLAS at one thread while the engine works and gives its threads back when it is idle.
- the SwiGLU's exp, which MLX's CPU backend evaluates one element at a time (engine.cpu.layer_ops).

Quantized layers kept as stored (engine.cpu.stored) go to the compiled kernel instead, which uses
every core in each call: q, k and v in one call, gate and up with the SwiGLU in another. In a pass of
one group (a decode step, or a prompt's chunk alone) the q, k and v call also turns q and k by RoPE
and hands them out as heads, and the o projection reads attention's heads as its rows: a layer is 9
operations of the step's graph, not 12 (each costs the engine's thread and MLX's stream thread a few
microseconds). A decode step, or speculative decoding's checking pass, goes further: every layer in one
operation (engine.cpu.layer_stack), the same work by the same functions. Either way the pass holds its
tokens as rows (tokens, hidden), so no reshape is built around each matmul.

mlx-lm's model is left untouched, so anything else in the process that runs it (mlx-lm's own
generators) is unaffected.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from mlxchat.engine.cpu import layer_ops, stored
from mlxchat.engine.cpu.blas import SingleThreadedBlas
from mlxchat.engine.cpu.layer_stack import LayerStack

LLAMA_MODULE = "mlx_lm.models.llama"
# Below this many weights in a layer's MLP (hidden x intermediate), a second stream costs more than it
# saves: the bench's "narrow" llama (30 layers, 64 wide) evaluated a step at 8 rows in 9.2-10.2 ms
# spread, 5.8-8.5 ms on one stream (best of 40, three runs each, AMD EPYC).
SPREAD_WEIGHTS = 1 << 18


def supports(model: Any, head: Any) -> bool:
    """Whether `model` is mlx-lm's llama, without sliding-window layers, on the CPU, with float weights
    or quantized ones the compiled kernel multiplies by (engine.cpu.stored).

    `head` is the module whose weight gives the logits (lm_head or the tied embedding).
    """
    if mx.default_device().type != mx.cpu or type(model).__module__ != LLAMA_MODULE:
        return False
    if getattr(model.model, "swa_idx", None) is not None:
        return False
    kinds = {type(m) for layer in model.model.layers for m in _linears(layer)}
    if kinds == {nn.Linear}:
        return type(head) in (nn.Linear, nn.Embedding)
    # Stored layers: where the rest computes in float32 ("auto"), the kernel's rows need no cast.
    return (
        kinds <= {stored.StoredLinear, stored.StoredHalfLinear}
        and type(head) in stored.STORED_TYPES
        and model.model.norm.weight.dtype == mx.float32
    )


def _linears(layer: Any) -> tuple[Any, ...]:
    attn, mlp = layer.self_attn, layer.mlp
    return attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj


class _Weight:
    """One linear layer's float weight (out, in), transposed once: whole, and as two halves of its output rows.

    Views, no copies; made once so that a pass does not build a transpose per matmul.
    """

    def __init__(self, weight: mx.array, bias: mx.array | None = None) -> None:
        half = weight.shape[0] // 2
        self.t = weight.T
        self.halves = (weight[:half].T, weight[half:].T)
        self.bias = bias
        mx.eval(self.t, self.halves)

    def __call__(self, x: mx.array) -> mx.array:
        """x @ weight.T (+ bias), on the current stream."""
        return x @ self.t if self.bias is None else mx.addmm(self.bias, x, self.t)

    def spread(self, x: mx.array, other: mx.Stream, spread: bool) -> mx.array:
        """x @ weight.T (+ bias): with `spread`, each half of the output on its own stream, else whole."""
        return self.split(x, other) if spread else self(x)

    def split(self, x: mx.array, other: mx.Stream) -> mx.array:
        """x @ weight.T (+ bias), each half of the output on its own stream."""
        first, second = self.halves
        y1 = x @ first
        with mx.stream(other):
            y2 = x @ second
        y = mx.concatenate([y1, y2], axis=-1)
        return y if self.bias is None else y + self.bias


class _FloatLayer:
    """A decoder layer's float weights, multiplied through the BLAS: spread over two streams, or for a model
    too narrow to gain from that (each split costs operations of its own), whole on one."""

    def __init__(self, layer: Any, spread: bool) -> None:
        self.q, self.k, self.v, self.o, self.gate, self.up, self.down = (
            _Weight(m.weight, m.get("bias")) for m in _linears(layer)
        )
        self.spread = spread

    def qkv(self, x: mx.array, other: mx.Stream) -> list[mx.array]:
        queries = self.q(x)
        with mx.stream(other):
            return [queries, self.k(x), self.v(x)]

    def qkv_heads(self, x: mx.array, rope: layer_ops.Rope, batch: int, attn: Any,
                  offsets: Callable[[], mx.array]) -> list[mx.array] | None:
        """None: float weights' q, k and v come from the BLAS, turned by RoPE apart."""
        return None

    def out(self, x: mx.array, other: mx.Stream) -> mx.array:
        return self.o.spread(x, other, self.spread)

    def mlp(self, x: mx.array, other: mx.Stream) -> mx.array:
        gate = self.gate(x)
        with mx.stream(other):
            up = self.up(x)
        hidden = layer_ops.swiglu(gate, up)
        return self.down.spread(hidden, other, self.spread)


class _StoredLayer:
    """A decoder layer's quantized weights as stored, multiplied by the compiled kernel: q, k and v in one
    call, gate and up with the SwiGLU in another (each call already uses every core)."""

    def __init__(self, layer: Any) -> None:
        q, k, v, o, gate, up, down = _linears(layer)
        self._qkv = [stored.Call([q, k, v])] if stored.fusable([q, k, v]) else [stored.Call([m]) for m in (q, k, v)]
        fused = stored.fusable([gate, up]) and "bias" not in gate and "bias" not in up
        self._mlp = [stored.Call([gate, up], swiglu=True)] if fused else [stored.Call([gate]), stored.Call([up])]
        self._o, self._down = stored.Call([o]), stored.Call([down])

    def qkv(self, x: mx.array, other: mx.Stream) -> list[mx.array]:
        return [out for call in self._qkv for out in call.rows(x)]

    def qkv_heads(self, x: mx.array, rope: layer_ops.Rope, batch: int, attn: Any,
                  offsets: Callable[[], mx.array]) -> list[mx.array] | None:
        """q, k and v of one group's rows x as heads (batch, heads, L, dim), q and k turned by `rope`, in the
        matmul's own operation (a pass of one group, a decode step's among them, then holds two operations fewer a
        layer); None where that cannot serve (the RoPE not compiled, q, k and v in calls apart or with biases)."""
        turned = rope.epilogue()
        if turned is None or len(self._qkv) != 1 or not self._qkv[0].bare():
            return None
        return self._qkv[0].rows_rope(x, batch, attn.head_dim, 2, offsets(), turned)

    def out(self, x: mx.array, other: mx.Stream) -> mx.array:
        return self._o.rows(x)[0]

    def mlp(self, x: mx.array, other: mx.Stream) -> mx.array:
        hidden = [out for call in self._mlp for out in call.rows(x)]
        return self._down.rows(hidden[0] if len(hidden) == 1 else layer_ops.swiglu(*hidden))[0]

    def stack_calls(self) -> list[stored.Call] | None:
        """Its q/k/v, o, gate/up and down calls for the layer stack (engine.cpu.layer_stack), or None where q, k and v
        or gate and up are calls apart, or a call adds biases."""
        if len(self._qkv) != 1 or len(self._mlp) != 1:
            return None
        calls = [self._qkv[0], self._o, self._mlp[0], self._down]
        return None if any(call.stack_arrays() is None for call in calls) else calls


class CpuLlama:
    """The model's body (inputs, caches) -> final hidden states, and its head, run split across two cores."""

    def __init__(self, model: Any, head: Any) -> None:
        self.inner = model.model
        self.cores = SingleThreadedBlas()
        self._other: mx.Stream | None = None
        args = self.inner.args
        # Whether work is spread over two MLX streams: float weights through the BLAS, in a model wide enough.
        as_stored = isinstance(head, stored.STORED_TYPES)
        self._spread = not as_stored and args.hidden_size * args.intermediate_size >= SPREAD_WEIGHTS
        if as_stored:
            self._head: Any = stored.Call([head])
            self._layers: list[Any] = [_StoredLayer(layer) for layer in self.inner.layers]
        else:
            self._head = _Weight(head.weight)
            self._layers = [_FloatLayer(layer, self._spread) for layer in self.inner.layers]
        # Each layer's norms and RoPE, compiled where they run (one operation each, not tens). A norm takes the
        # residual add before it: after attention the layer's second norm, after the MLP the next layer's first
        # (after the last, the final norm).
        layers = self.inner.layers
        self._first_norm = layer_ops.norm(layers[0].input_layernorm)
        nexts = [layer.input_layernorm for layer in layers[1:]] + [self.inner.norm]
        self._adds = [(layer_ops.add_norm(layer.post_attention_layernorm), layer_ops.add_norm(after))
                      for layer, after in zip(layers, nexts)]
        self._ropes = [layer_ops.Rope(layer.self_attn.rope) for layer in layers]
        self._stack = LayerStack.of(self.inner, self._layers, self._ropes) if as_stored else None

    def body(self, inputs: mx.array, caches: list[Any]) -> mx.array:
        """What `model.model(inputs, caches)` returns; `caches` are the engine's slot caches."""
        return self.bodies([(inputs, caches)])[0]

    def bodies(self, groups: list[tuple[mx.array, list[Any]]]) -> list[mx.array]:
        """`body` for several groups of rows at once, each (B, L) with its own caches: their tokens share
        every matmul (one read of the weights), and each group attends over its own slots."""
        if self._other is None:
            # Made on the engine thread, which owns every MLX stream it uses. The compiled kernels use
            # every core in each call: a second stream would only add waits between the two.
            self._other = mx.new_stream(mx.cpu) if self._spread else mx.default_stream(mx.cpu)
        inner = self.inner
        shapes = [inputs.shape for inputs, _ in groups]
        # Every group's tokens as rows (tokens, hidden): what the matmuls take, with no reshape around them.
        h = mx.concatenate([inner.embed_tokens(inputs).reshape(-1, inner.args.hidden_size)
                            for inputs, _ in groups], axis=0)
        normed = self._stack(h, [caches for _, caches in groups]) if self._stack is not None else None
        if normed is not None:
            return self._by_group(normed, shapes)
        normed = self._first_norm(h)
        for i, (layer, weights, (after_attention, after_mlp)) in enumerate(zip(inner.layers, self._layers, self._adds)):
            caches = [layer_caches[i] for _, layer_caches in groups]
            attended = self._attend(layer.self_attn, self._ropes[i], normed, caches, shapes, weights)
            h, normed = after_attention(h, weights.out(attended, self._other))
            h, normed = after_mlp(h, weights.mlp(normed, self._other))
        return self._by_group(normed, shapes)

    @staticmethod
    def _by_group(normed: mx.array, shapes: list[tuple[int, int]]) -> list[mx.array]:
        """The final norm's output (tokens, hidden) as each group's (B, L, hidden)."""
        if len(shapes) == 1:
            return [normed.reshape(*shapes[0], -1)]
        out, start = [], 0
        for b, n in shapes:
            out.append(normed[start : start + b * n].reshape(b, n, -1))
            start += b * n
        return out

    def head(self, states: mx.array) -> mx.array:
        """Logits for final hidden states."""
        if isinstance(self._head, _Weight):
            return self._head.spread(states, self._other, self._spread)
        return self._head.rows(states)[0]

    def _attend(
        self, attn: Any, rope: layer_ops.Rope, x: mx.array, caches: list[Any], shapes: list[tuple[int, int]],
        weights: Any
    ) -> mx.array:
        """Self-attention for x (tokens of every group, hidden), before its output projection: q, k and v once,
        attention group by group."""
        heads = weights.qkv_heads(x, rope, shapes[0][0], attn, caches[0].layout.offsets) if len(shapes) == 1 else None
        if heads is not None:
            queries, keys, values = heads
            caches[0].write(keys, values)
            out = caches[0].attend(queries, attn.scale, None)
            # One token a sequence: the heads are already the rows the kernel's o projection reads.
            return out if out.shape[2] == 1 else layer_ops.as_rows(out)
        queries_all, keys_all, values_all = weights.qkv(x, self._other)
        grouped, writes, start = [], [], 0
        for cache, (b, n) in zip(caches, shapes):
            # One group takes the arrays whole: no slice to build and evaluate in each of the layers.
            part = [a if len(shapes) == 1 else a[start : start + b * n] for a in (queries_all, keys_all, values_all)]
            start += b * n
            queries, keys = rope(part[:2], b, [attn.n_heads, attn.n_kv_heads], cache.offset, cache.layout.offsets)
            grouped.append(queries)
            writes.append((cache, keys, layer_ops.as_heads(part[2], b, attn.n_kv_heads)))
        # Every group's K/V is written before any attends: each write can then update the buffer in
        # place (an earlier version still read by attention would make MLX copy the whole buffer).
        # The prompt chunk's first: a mixed pass with 3 decode rows and 8 prompt tokens at 2,500 keys
        # cost 47-55 ms more than the chunk alone that way, 75-82 ms decode rows first (2 runs each).
        for cache, keys, values in reversed(writes):
            cache.write(keys, values)
        outs = []
        for cache, queries, (b, n) in zip(caches, grouped, shapes):
            # Without the kernels, attention costs a few small matmuls per row: half the rows on each stream.
            half = b // 2 if self._spread else 0
            if half:
                first = cache.attend(queries[:half], attn.scale, None, slice(0, half))
                with mx.stream(self._other):
                    second = cache.attend(queries[half:], attn.scale, None, slice(half, b))
                out = mx.concatenate([first, second], axis=0)
            else:
                out = cache.attend(queries, attn.scale, None)
            outs.append(layer_ops.as_rows(out))
        return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
