"""int8 activations (`int8_activations = true`): the compiled matmul multiplies 4- and 8-bit weights by rows
rounded to int8 in blocks of 32, as llama.cpp does. What it computes is the rounding followed by exact
arithmetic; a row's bits do not depend on the rows beside it, nor on which of the kernel's paths ran; and a
model loaded that way still gives each batched reply the reply it gets alone."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.cpu import kernels, stored
from mlxchat.engine.cpu.stored import INT8_REFUSED
from mlxchat.engine.loading.models import LoadOptions, load_model
from mlxchat.engine.loading.progress import ModelLoadError
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_stored_weights import (
    assert_batched_replies_equal_alone,
    assert_replies_beside_others_equal_alone,
    ext,
    quantized,
    widened,
)
from tests.tiny_families import FAMILIES, build_family
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.skipif(not kernels.status().active, reason="the compiled kernels are not built here")

ON, PORTABLE, AVX2 = 1, 2, 3  # the kernel's int8 argument: the fastest path here, the portable loops, AVX2's
# (AVX2's where the CPU has it: x86-64-v3 is AVX2, FMA and F16C, which that path needs)
HAS_AVX2 = kernels.status().active and "x86-64-v" in kernels.status().module.isa()
PATHS = (ON, PORTABLE, AVX2) if HAS_AVX2 else (ON, PORTABLE)


def rounded_then_float64(x: mx.array, q: list[mx.array], bits: int, group: int) -> np.ndarray:
    """Each block of 32 values of x rounded to int8 with the scale max|x| / 127, then multiplied by the
    dequantized weights in float64."""
    blocks = np.array(x).reshape(x.shape[0], -1, 32).astype(np.float64)
    scale = np.abs(blocks).max(-1, keepdims=True) / 127
    rows = (np.clip(np.round(blocks / np.where(scale == 0, 1, scale)), -127, 127) * scale).reshape(x.shape)
    return rows @ np.array(widened(q, bits, group)).astype(np.float64).T


@pytest.mark.parametrize("bits, group, scales", [
    (4, 32, mx.float16), (4, 64, mx.bfloat16), (4, 128, mx.float32), (8, 32, mx.float16), (8, 64, mx.float32),
    (8, 128, mx.bfloat16),
])
@pytest.mark.parametrize("groups", [2, 5, 9])  # chunks of 64 weight bytes whole, and cut short
def test_int8_rows_are_the_rounding_then_exact_products(bits, group, scales, groups):
    k = groups * group
    q = quantized(37, k, bits, group, scales)
    x = mx.random.normal((11, k), key=mx.random.key(1))
    want = rounded_then_float64(x, q, bits, group)
    for int8 in PATHS:
        got = np.array(ext().weights_matmul(x, q, bits, group, False, 2, int8)[0])
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), int8
    # ...which is not the float32 product: the setting is opt-in for that reason.
    float_rows = ext().weights_matmul(x, q, bits, group, False, 2)[0]
    assert not mx.allclose(float_rows, mx.array(want.astype(np.float32)), atol=1e-4).item()


@pytest.mark.parametrize("bits, scales", [(4, mx.float16), (8, mx.bfloat16)])
def test_an_int8_rows_bits_do_not_depend_on_its_neighbours_nor_on_the_path(bits, scales):
    # The vector paths take rows 8 (AVX-512) or 4 (AVX2) at a time and columns 1, 2 or 4 at a time by the rows'
    # count: each count crosses one.
    q = quantized(45, 192, bits, 64, scales)
    x = mx.random.normal((20, 192), key=mx.random.key(2))
    alone = [ext().weights_matmul(x[r : r + 1], q, bits, 64, False, 1, ON)[0] for r in range(20)]
    for rows in range(2, 21):
        for int8 in PATHS:
            together = ext().weights_matmul(x[:rows], q, bits, 64, False, 2, int8)[0]
            assert mx.array_equal(together, mx.concatenate(alone[:rows])).item(), (rows, int8)


def test_the_fused_swiglu_over_int8_rows_is_the_swiglu_of_both_products():
    gate, up = quantized(96, 128, 4, 32, mx.float16, 5), quantized(96, 128, 4, 32, mx.float16, 6)
    x = mx.random.normal((4, 128), key=mx.random.key(7))
    g, u = ext().weights_matmul(x, gate + up, 4, 32, False, 2, ON)
    fused = ext().weights_matmul(x, gate + up, 4, 32, True, 2, ON)[0]
    assert mx.array_equal(fused, ext().swiglu(g, u)).item()


def test_rows_that_are_not_finite_give_nan_and_zero_rows_give_zero():
    q = quantized(8, 64, 4, 32, mx.float16)
    x = mx.array([[float("nan")] + [1.0] * 63, [float("inf")] + [1.0] * 63, [0.0] * 64])
    got = ext().weights_matmul(x, q, 4, 32, False, 1, ON)[0]
    assert mx.isnan(got[:2]).all().item() and mx.array_equal(got[2], mx.zeros(8)).item()


def test_an_unknown_int8_mode_is_refused():
    with pytest.raises(ValueError, match="int8 must be 0, 1, 2 or 3"):
        ext().weights_matmul(mx.zeros((2, 64)), quantized(8, 64, 4, 32, mx.float16), 4, 32, False, 1, 4)


def test_a_model_loaded_with_int8_activations_gives_batched_replies_equal_alone(tiny_model_dir: Path,
                                                                                  tmp_path: Path):
    """The app's load, the setting on: its quantized layers round their rows (the load's batch check runs them
    in float32 all the same), and every reply of rows sharing passes is the one it gets alone."""
    model = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
    loaded = load_model(str(model), LoadOptions(int8_activations=True, cache_dir=models_cache_dir()))
    assert loaded.dtype == "q4 (group 32), int8 activations" and loaded.weights.int8_activations
    layers = [m for _, m in loaded.model.named_modules() if isinstance(m, stored.StoredLinear)]
    assert layers and all(m.int8_rows for m in layers)
    assert "int8 activations" in loaded.kv_key  # (saved K/V of float rows is not read back, nor the reverse)
    assert_batched_replies_equal_alone(model, tmp_path, int8_activations=True)


def test_int8_activations_on_a_float_model_is_refused_saying_what_to_change(tiny_model_dir: Path):
    with pytest.raises(ModelLoadError) as refused:
        load_model(str(tiny_model_dir), LoadOptions(int8_activations=True, cache_dir=models_cache_dir()))
    assert str(refused.value) == INT8_REFUSED and "set int8_activations = false" in INT8_REFUSED


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_with_int8_rows_gives_batched_replies_equal_alone(family, tiny_model_dir):
    """Every layer kind the engine runs (q/k norms, windows, convolutions, MLA, experts, recurrent states): 4-bit
    layers as stored with int8 rows, each slot's reply beside the others' equals its reply alone, prompts read 4
    tokens a pass."""
    import mlx.nn as nn
    from mlx_lm.utils import load_tokenizer

    from mlxchat.engine.local_engine import Engine
    from tests.engine.test_families import GREEDY, PROMPTS, plan

    model = build_family(family)
    nn.quantize(model, group_size=32, bits=4,
                class_predicate=lambda _, m: hasattr(m, "to_quantized") and m.weight.shape[-1] % 32 == 0)
    stored.install(model)
    stored.compute_in_float32(model)
    assert stored.round_rows_to_int8(model)
    engine = Engine(ready_for_slots(model, load_tokenizer(tiny_model_dir)), plan(), prefill_chunk=4)
    assert_replies_beside_others_equal_alone(engine, PROMPTS, GREEDY, 60)
