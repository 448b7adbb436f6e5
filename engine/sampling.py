"""Per-slot token sampling for a batch of logits: greedy rows in one op, sampled rows with their own seed."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.sample_utils import apply_top_p

from mlxchat.engine.events import SamplingParams


class SlotSampler:
    """Samples one slot's tokens with its params; a seed makes the sequence reproducible."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.key = mx.random.key(params.seed) if params.seed is not None else None

    @property
    def greedy(self) -> bool:
        return self.params.temperature <= 0

    def sample(self, logits: mx.array) -> mx.array:
        """A token id from one row of logits (shape (vocab,)): among the top_k, then the top_p of their mass.

        With top_k, the nucleus and the draw are computed over those k tokens alone: the same distribution
        as masking the others in the whole vocabulary, without sorting it (SmolLM2's 49,152 logits: 6.6 ms
        a token that way at top_k 40 and top_p 0.95, 0.7 ms this way; AMD EPYC).
        """
        p = self.params
        kept = None
        if 0 < p.top_k < logits.shape[-1]:
            kept = mx.argpartition(-logits, kth=p.top_k - 1)[: p.top_k]
            logits = logits[kept]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        if 0 < p.top_p < 1:
            logprobs = apply_top_p(logprobs, p.top_p)
        key = None
        if self.key is not None:
            self.key, key = mx.random.split(self.key)
        choice = mx.random.categorical(logprobs * (1.0 / p.temperature), key=key)
        return choice if kept is None else kept[choice]


def sample_rows(logits: mx.array, samplers: list[SlotSampler]) -> mx.array:
    """Token ids (B,) for logits (B, vocab), each row by its slot's sampler."""
    tokens = mx.argmax(logits, axis=-1)
    if all(s.greedy for s in samplers):
        return tokens
    picked = [tokens[i] if s.greedy else s.sample(logits[i]) for i, s in enumerate(samplers)]
    return mx.stack(picked)
