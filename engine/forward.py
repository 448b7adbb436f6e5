"""The engine's forward pass: logits at one position per row, skipping the head elsewhere where possible."""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx

# Families whose Model.__call__ is exactly `head(self.model(inputs, cache))`, the head being
# lm_head or the tied embedding. For them a prefill chunk skips the head on every position
# but the one it needs (on SmolLM2 that is about a quarter of a chunk's work).
PLAIN_HEAD_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}

LogitsFn = Callable[[mx.array, list[Any], mx.array | None], mx.array]


def logits_fn(model: Any) -> LogitsFn:
    """A function (inputs (B, L), caches, positions (B,)) -> logits (B, vocab) at each row's position.

    Positions may be None when L is 1.
    """
    family = type(model).__module__.rsplit(".", 1)[-1]
    args = getattr(model, "args", None)
    if family not in PLAIN_HEAD_FAMILIES or args is None or not hasattr(model, "model"):
        return lambda inputs, caches, positions: _at(model(inputs, cache=caches), positions)
    if getattr(args, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
        head = model.model.embed_tokens.as_linear
    else:
        head = model.lm_head
    return lambda inputs, caches, positions: head(_at(model.model(inputs, caches), positions))


def _at(x: mx.array, positions: mx.array | None) -> mx.array:
    """x[b, positions[b]] for x of shape (B, L, D)."""
    if positions is None:
        return x[:, 0, :]
    return mx.take_along_axis(x, positions[:, None, None], axis=1)[:, 0, :]
