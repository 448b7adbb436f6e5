"""The CPU fast paths: exp-based functions match MLX's, and the BLAS thread count is given back."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlxchat.engine.cpu import activations
from mlxchat.engine.cpu.blas import SingleThreadedBlas, _thread_calls
from tests.markers import needs_cpu

pytestmark = needs_cpu


def test_exp_matches_mlx_within_float32_rounding() -> None:
    x = mx.linspace(-87.0, 88.0, 100_001)
    assert (mx.abs(activations.exp(x) - mx.exp(x)) / mx.exp(x)).max().item() < 2e-7
    assert activations.exp(mx.array([-88.0, -1e4, -mx.inf])).tolist() == [0.0, 0.0, 0.0]


def test_swiglu_and_softmax_match_mlx() -> None:
    gate, x = mx.random.normal((8, 1, 1536)) * 8, mx.random.normal((8, 1, 1536))
    assert mx.allclose(activations.swiglu(gate, x), nn.silu(gate) * x, atol=1e-5).item()
    scores = mx.random.normal((8, 3, 3, 300)) * 10
    scores = mx.where(mx.arange(300) < 250, scores, mx.finfo(mx.float32).min)
    assert scores.size >= activations.SOFTMAX_MIN_ELEMENTS
    assert mx.allclose(activations.softmax(scores), mx.softmax(scores, axis=-1, precise=True), atol=1e-7).item()


def test_single_threaded_blas_gives_the_thread_count_back() -> None:
    calls = _thread_calls()
    if calls is None:
        pytest.skip("this BLAS has no thread count to hold (the reference one)")
    get, _ = calls
    before = get()
    held = SingleThreadedBlas()
    held.hold()
    held.hold()
    assert get() == 1
    held.release()
    assert get() == before
