"""The slot sampler draws from the distribution its params define: the top_k tokens, then the smallest set of
them holding top_p of their mass, at the temperature; a seed gives the same draws again."""

from __future__ import annotations

from collections import Counter

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.engine.sampling import SlotSampler, sample_rows

LOGITS = np.linspace(4.0, -4.0, 64).astype(np.float32)[np.random.default_rng(3).permutation(64)]


def expected(params: SamplingParams) -> dict[int, float]:
    """The definition, on numpy: each kept token's probability."""
    order = np.argsort(-LOGITS, kind="stable")
    if 0 < params.top_k < len(LOGITS):
        order = order[: params.top_k]
    probs = np.exp(LOGITS[order] - LOGITS[order].max())
    probs /= probs.sum()
    if 0 < params.top_p < 1:
        above = np.concatenate([[0.0], np.cumsum(probs)[:-1]])  # mass of the tokens ranked higher
        order, keep = order[above < params.top_p], above < params.top_p
        probs = probs[keep]
    tempered = np.exp((np.log(probs) - np.log(probs).max()) / params.temperature)
    return dict(zip(order.tolist(), (tempered / tempered.sum()).tolist()))


@pytest.mark.parametrize("top_k, top_p", [(6, 0.8), (0, 0.6), (10, 1.0)])
def test_draws_follow_the_top_k_then_top_p_distribution(top_k, top_p):
    params = SamplingParams(temperature=0.8, top_k=top_k, top_p=top_p, seed=11)
    want = expected(params)
    sampler, logits, draws = SlotSampler(params), mx.array(LOGITS), 3000
    counts = Counter(sampler.sample(logits).item() for _ in range(draws))
    assert set(counts) <= set(want), "a token outside the kept set was drawn"
    for token, p in want.items():
        sigma = (draws * p * (1 - p)) ** 0.5
        assert abs(counts[token] - draws * p) <= 4 * sigma + 1, (token, counts[token], draws * p)


def test_a_seed_gives_the_same_draws_in_a_batch_as_alone():
    params = SamplingParams(temperature=0.9, top_k=8, top_p=0.9, seed=5)
    logits = mx.array(np.stack([LOGITS, LOGITS[::-1], LOGITS]))
    alone = SlotSampler(params)
    in_batch = [SlotSampler(params), SlotSampler(SamplingParams()), SlotSampler(SamplingParams(temperature=1.0))]
    for _ in range(20):
        assert sample_rows(logits, in_batch)[0].item() == alone.sample(logits[0]).item()
