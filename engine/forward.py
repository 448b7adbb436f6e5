"""The engine's forward pass: logits of the last position only, where the model's head allows it."""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx

# Families whose Model.__call__ is exactly `head(self.model(inputs, cache))`, the head being
# lm_head or the tied embedding. For them a prefill chunk skips the head on every position
# but the last (on SmolLM2 that is about a quarter of a chunk's work).
PLAIN_HEAD_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}


def last_logits_fn(model: Any) -> Callable[[mx.array, list[Any]], mx.array]:
    """A function (inputs (B, L), caches) -> logits (B, vocab) of each row's last position."""
    family = type(model).__module__.rsplit(".", 1)[-1]
    args = getattr(model, "args", None)
    if family not in PLAIN_HEAD_FAMILIES or args is None or not hasattr(model, "model"):
        return lambda inputs, caches: model(inputs, cache=caches)[:, -1, :]
    if getattr(args, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
        head = model.model.embed_tokens.as_linear
    else:
        head = model.lm_head
    return lambda inputs, caches: head(model.model(inputs, caches)[:, -1, :])
