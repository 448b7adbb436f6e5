"""The slot sampler draws from the distribution its params define: the top_k tokens, then the smallest set of
them holding top_p of their mass, at the temperature; a seed gives the same draws again."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.engine.cpu import kernels
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.sampling import SlotSampler, sample_rows
from tests.markers import needs_cpu

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


@pytest.fixture(params=[pytest.param("compiled top-k", marks=needs_cpu), "MLX's argpartition"])
def top_k_path(request, monkeypatch):
    """Each test runs on both ways of finding the top_k: the kernel, and MLX's own where it is not built."""
    if request.param != "compiled top-k":
        monkeypatch.setenv(kernels.OFF_VARIABLE, "off")
    kernels.status.cache_clear()
    assert kernels.status().active == (request.param == "compiled top-k")
    yield
    monkeypatch.delenv(kernels.OFF_VARIABLE, raising=False)
    kernels.status.cache_clear()


@pytest.mark.parametrize("top_k, top_p", [(6, 0.8), (0, 0.6), (10, 1.0)])
def test_draws_follow_the_top_k_then_top_p_distribution(top_k, top_p, top_k_path):
    params = SamplingParams(temperature=0.8, top_k=top_k, top_p=top_p, seed=11)
    want = expected(params)
    sampler, logits, draws = SlotSampler(params), mx.array(LOGITS)[None], 3000
    counts = Counter(sample_rows(logits, [sampler]).item() for _ in range(draws))
    assert set(counts) <= set(want), "a token outside the kept set was drawn"
    for token, p in want.items():
        sigma = (draws * p * (1 - p)) ** 0.5
        assert abs(counts[token] - draws * p) <= 4 * sigma + 1, (token, counts[token], draws * p)


def test_a_seed_gives_the_same_draws_in_a_batch_as_alone(top_k_path):
    """Rows 0 and 2 share their settings (one group), with seeds of their own; the others differ."""
    params = SamplingParams(temperature=0.9, top_k=8, top_p=0.9, seed=5)
    other = replace(params, seed=6)
    logits = mx.array(np.stack([LOGITS, LOGITS[::-1], LOGITS[::2].repeat(2), LOGITS]))
    in_batch = [SlotSampler(params), SlotSampler(SamplingParams()), SlotSampler(other),
                SlotSampler(SamplingParams(temperature=1.0))]
    alone = [SlotSampler(params), SlotSampler(other)]
    for _ in range(20):
        batch = sample_rows(logits, in_batch).tolist()
        assert batch[0] == sample_rows(logits[0:1], [alone[0]]).item()
        assert batch[2] == sample_rows(logits[2:3], [alone[1]]).item()
        assert batch[1] == mx.argmax(logits[1]).item()
