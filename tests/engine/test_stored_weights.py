"""Weights kept as stored on the CPU: the compiled matmul equals float32 dequantizing (or widening half
precision), a row's result does not depend on the rows beside it, and quantized and bfloat16 models load
and run that way as the app runs them."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlx.utils import tree_flatten

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.cpu import kernels, stored
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.loading.models import LoadOptions, load_model
from tests.engine.test_family_matrix import PROMPTS, generated, start_as_the_app
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.skipif(not kernels.status().active, reason="the compiled kernels are not built here")


def ext():
    return kernels.status().module


def quantized(n: int, k: int, bits: int, group: int, scales: mx.Dtype, seed: int = 0) -> list[mx.array]:
    weight, s, b = mx.quantize(mx.random.normal((n, k), key=mx.random.key(seed)), group, bits)
    return [weight, s.astype(scales), b.astype(scales)]


def widened(q: list[mx.array], bits: int, group: int) -> mx.array:
    """What float32 dequantizing gives (scales widened first, as the kernel does)."""
    return mx.dequantize(q[0], q[1].astype(mx.float32), q[2].astype(mx.float32), group, bits)


@pytest.mark.parametrize("bits, group, scales", [
    (4, 32, mx.float16), (4, 64, mx.bfloat16), (4, 128, mx.float32), (8, 32, mx.float16), (8, 64, mx.float32),
])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 20])
def test_matmul_equals_float32_dequantizing(bits, group, scales, rows):
    q = quantized(70, 256, bits, group, scales)
    x = mx.random.normal((rows, 256), key=mx.random.key(1))
    for threads in (1, 2):
        got = ext().weights_matmul(x, q, bits, group, False, threads)[0]
        assert mx.allclose(got, x @ widened(q, bits, group).T, atol=1e-4, rtol=1e-5).item()


@pytest.mark.parametrize("bits", [4, 8])
def test_a_rows_result_is_bit_identical_whatever_number_of_rows_shares_the_call(bits):
    # Few rows widen weights in registers (up to 8, 12 on AVX2, 16 on AVX-512), more widen them to memory in panels of
    # 6: every count crosses a path.
    q = quantized(45, 128, bits, 32, mx.float16)
    x = mx.random.normal((20, 128), key=mx.random.key(2))
    alone = [ext().weights_matmul(x[r : r + 1], q, bits, 32, False, 1)[0] for r in range(20)]
    for rows in range(2, 21):
        together = ext().weights_matmul(x[:rows], q, bits, 32, False, 2)[0]
        for r in range(rows):
            assert mx.array_equal(together[r : r + 1], alone[r]).item(), (rows, r)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scales", [mx.float16, mx.bfloat16, mx.float32])
def test_a_rows_result_is_the_same_bits_past_the_groups_made_float32_at_once(bits, scales):
    # Up to 16 rows take their own loop on AVX-512, in panels of 8, which makes 64 groups' scales float32 at a
    # time: 70 groups cross that, and 9 columns the four and the two at a time; 17 rows take the outer products.
    q = quantized(9, 32 * 70, bits, 32, scales, seed=3)
    x = mx.random.normal((17, 32 * 70), key=mx.random.key(4))
    alone = [ext().weights_matmul(x[r : r + 1], q, bits, 32, False, 1)[0] for r in range(17)]
    for rows in (2, 3, 5, 10, 17):
        together = ext().weights_matmul(x[:rows], q, bits, 32, False, 2)[0]
        assert all(mx.array_equal(together[r : r + 1], alone[r]).item() for r in range(rows)), rows


def test_several_weights_and_the_swiglu_in_one_call():
    gate, up = quantized(96, 128, 4, 32, mx.float16, 5), quantized(96, 128, 4, 32, mx.float16, 6)
    x = mx.random.normal((4, 128), key=mx.random.key(7))
    g, u = x @ widened(gate, 4, 32).T, x @ widened(up, 4, 32).T
    both = ext().weights_matmul(x, gate + up, 4, 32, False, 2)
    assert [mx.allclose(a, b, atol=1e-4).item() for a, b in zip(both, (g, u))] == [True, True]
    fused = ext().weights_matmul(x, gate + up, 4, 32, True, 2)
    assert len(fused) == 1
    assert mx.allclose(fused[0], g * mx.sigmoid(g) * u, rtol=1e-4, atol=1e-3).item()


@pytest.mark.parametrize("bits, int8", [(4, 0), (8, 1), (16, 0)])
@pytest.mark.parametrize("batch, length, offsets, traditional", [
    (1, 1, [37], False), (3, 1, [0, 5, 900], True), (2, 3, [4, 11], False), (2, 4, [6], True),
])
def test_q_k_and_v_as_heads_turned_by_rope_give_the_bits_of_the_matmul_and_rope_apart(bits, int8, batch, length,
                                                                                       offsets, traditional):
    # A layer's q, k and v and their RoPE as one operation: q and k turned, v only moved into heads; one token a
    # sequence (a decode step) and several (a chunk, whose heads are a transpose of the rows).
    head_dim, weights = 16, []
    for n, seed in ((64, 20), (32, 21), (32, 22)):  # 4 query heads, 2 K/V heads
        weights += quantized(n, 128, bits, 32, mx.float16, seed) if bits < 16 else [
            mx.random.normal((n, 128), key=mx.random.key(seed)).astype(mx.float16)]
    group = 32 if bits < 16 else 0
    x = mx.random.normal((128, batch * length), key=mx.random.key(23)).T  # a view: its rows gathered
    inverse = mx.exp(mx.arange(0.0, -6.0, -1.0) * 1.3)  # 6 pairs: 12 of each head's 16 turned
    at = mx.array(offsets, dtype=mx.int32)
    q, k, v = ext().weights_matmul(x, weights, bits, group, False, 2, int8)
    want = [*ext().rope_rows([q, k], batch, [4, 2], at, inverse, traditional, 0.5),
            v.reshape(batch, length, 2, head_dim).transpose(0, 2, 1, 3)]
    got = ext().weights_matmul_rope(x, weights, bits, group, 2, int8, batch, head_dim, 2, at, inverse, traditional, 0.5)
    assert [a.shape for a in got] == [a.shape for a in want]
    assert all(mx.array_equal(a, b).item() for a, b in zip(got, want))


def test_heads_of_one_token_are_read_as_their_rows():
    # Attention's output (M, heads, 1, dim) goes to the o projection without a reshape: the same bits as its rows.
    q = quantized(24, 64, 4, 32, mx.float16, 24)
    heads = mx.random.normal((3, 4, 1, 16), key=mx.random.key(25))
    for a in (heads, mx.random.normal((4, 3, 1, 16), key=mx.random.key(26)).transpose(1, 0, 2, 3)):  # and a view
        got, want = ext().weights_matmul(a, q, 4, 32, False, 2)[0], ext().weights_matmul(a.reshape(3, 64), q, 4, 32,
                                                                                         False, 2)[0]
        assert got.shape == (3, 24) and mx.array_equal(got, want).item()
    with pytest.raises(ValueError, match=r"or heads of one token"):
        ext().weights_matmul(mx.zeros((3, 4, 2, 8)), q, 4, 32, False, 2)  # two tokens: not rows in that order


@pytest.mark.parametrize("batch, head_dim, rotated, offsets, pairs, message", [
    (3, 16, 2, [0], 6, "the rows must be batch sequences of one length"),  # 4 rows
    (2, 16, 4, [0], 6, "no more weights rotated than given"),
    (2, 16, 2, [0], 9, "two per pair within a head"),
    (2, 16, 2, [0, 1, 2], 6, "one or one per sequence"),
    (2, 12, 2, [0], 6, "whole heads"),  # 64 and 32 outputs
    (2, 0, 2, [0], 6, "a head dim of at least 1"),
    (2, 16, -1, [0], 6, "no more weights rotated than given"),
    (2, 16, 2, [0.0], 6, "int32 offsets"),
])
def test_a_rope_that_does_not_fit_the_products_is_refused(batch, head_dim, rotated, offsets, pairs, message):
    weights = quantized(64, 64, 4, 32, mx.float16) + quantized(32, 64, 4, 32, mx.float16, 1)
    with pytest.raises(ValueError, match=message):
        ext().weights_matmul_rope(mx.zeros((4, 64)), weights, 4, 32, 1, 0, batch, head_dim, rotated,
                                  mx.array(offsets, dtype=mx.int32 if isinstance(offsets[0], int) else mx.float32),
                                  mx.ones((pairs,)), False, 1.0)


@pytest.mark.parametrize("args, message", [
    ((mx.zeros((2, 64)), quantized(8, 64, 4, 32, mx.float16)[:2], 4, 32), "values, scales, biases"),
    ((mx.zeros((2, 96)), quantized(8, 64, 4, 32, mx.float16), 4, 32), "packed weights do not match K"),
    ((mx.zeros((2, 64)), quantized(8, 64, 4, 32, mx.float16), 3, 32), "bits must be 4, 8 or 16"),
    ((mx.zeros((2, 64), mx.float16), quantized(8, 64, 4, 32, mx.float16), 4, 32), r"x must be \(M, K\) float32"),
    ((mx.zeros((2, 64)), [], 16, 0), "no weights given"),
])
def test_bad_arguments_are_refused_with_the_reason(args, message):
    with pytest.raises(ValueError, match=message):
        ext().weights_matmul(*args, False, 1)


def test_unsupported_quantization_is_left_to_mlx():
    import mlx.nn as nn

    model = nn.Sequential(nn.QuantizedLinear(64, 32, bits=4, group_size=32), nn.QuantizedLinear(64, 32, bits=6))
    assert stored.install(model) == 1
    assert type(model.layers[0]) is stored.StoredLinear and type(model.layers[1]) is nn.QuantizedLinear


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_precision_weights_equal_float32_and_a_rows_result_does_not_depend_on_the_others(dtype):
    weight = (mx.random.normal((72, 96), key=mx.random.key(8)) * 0.1).astype(dtype)
    up = (mx.random.normal((72, 96), key=mx.random.key(9)) * 0.1).astype(dtype)
    x = mx.random.normal((20, 96), key=mx.random.key(10))
    want = x @ weight.astype(mx.float32).T
    got = ext().weights_matmul(x, [weight], 16, 0, False, 2)[0]
    assert mx.allclose(got, want, atol=1e-5).item()
    whole = [ext().weights_matmul(x[:m], [weight], 16, 0, False, 2)[0] for m in (1, 7, 8, 9, 20)]
    assert all(mx.array_equal(part, whole[-1][: part.shape[0]]).item() for part in whole)
    g, u = want, x @ up.astype(mx.float32).T
    fused = ext().weights_matmul(x, [weight, up], 16, 0, True, 2)[0]
    assert mx.allclose(fused, g * mx.sigmoid(g) * u, atol=1e-5).item()
    with pytest.raises(ValueError, match="all float16 or all bfloat16"):
        ext().weights_matmul(x, [weight, up.astype(mx.float32)], 16, 0, False, 1)


def test_every_finite_float16_weight_is_widened_to_its_exact_value():
    """The kernel widens float16 in integer steps of its own: subnormals, zeros and the extremes included."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    bits[(bits & 0x7C00) == 0x7C00] = 0  # infinities and NaNs: no finite product to compare
    weight = mx.array(bits.view(np.float16).reshape(-1, 8))
    got = ext().weights_matmul(mx.eye(8), [weight], 16, 0, False, 2)[0]
    assert mx.array_equal(got.T, weight.astype(mx.float32)).item()


def bfloat16_copy(model_dir: Path, to: Path) -> Path:
    """The model folder with every weight in bfloat16, as mlx-community's bf16 models come."""
    import shutil

    shutil.copytree(model_dir, to)
    for path in to.glob("*.safetensors"):
        weights = mx.load(str(path))
        mx.save_safetensors(str(path), {k: v.astype(mx.bfloat16) for k, v in weights.items()})
    return to


def assert_replies_beside_others_equal_alone(engine, prompts: list[list[int]], sampling: SamplingParams,
                                             timeout: float) -> None:
    """Each prompt's reply in slot 0 alone, then all at once in slots 0..n: every reply is the one it got alone."""
    try:
        alone = []
        for p in prompts:
            assert engine.submit(0, tokens=p, sampling=sampling).result(timeout).error is None
            alone.append(generated(engine, 0, p))
            engine.clear(0, park=False)
        handles = [engine.submit(i, tokens=p, sampling=sampling) for i, p in enumerate(prompts)]
        assert [h.result(timeout).error for h in handles] == [None] * len(prompts)
        assert [generated(engine, i, p) for i, p in enumerate(prompts)] == alone
    finally:
        engine.shutdown()


def assert_batched_replies_equal_alone(model: Path, tmp_path: Path, int8_activations: bool = False) -> None:
    """The model started as the app starts it: every reply of rows sharing passes is the one it gets alone."""
    engine = start_as_the_app(model, tmp_path / "cache", int8_activations=int8_activations)
    assert_replies_beside_others_equal_alone(engine, PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True), 120)


@pytest.mark.parametrize("form", ["Q4_1 GGUF", "bfloat16"])
def test_a_stored_model_loads_as_stored_and_batched_replies_equal_alone(form: str, tiny_model_dir: Path,
                                                                        tmp_path: Path):
    """The app's load ("auto", on the engine's own thread): kernel-backed layers, and every reply of rows
    sharing passes is the one it gets alone, token for token."""
    if form == "bfloat16":
        model = bfloat16_copy(tiny_model_dir, tmp_path / "tiny-bf16")
        dtype, kept = "bfloat16", {mx.bfloat16}
    else:
        model = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
        dtype, kept = "q4 (group 32)", {mx.uint32, mx.float16}
    loaded = load_model(str(model), LoadOptions(cache_dir=models_cache_dir()))
    assert stored.holds_stored(loaded.model) and loaded.dtype == dtype and loaded.weights.kernel_matmuls
    # What the kernel reads stays as stored; the rest (norms) computes in float32.
    assert {p.dtype for _, p in tree_flatten(loaded.model.parameters())} == kept | {mx.float32}
    assert_batched_replies_equal_alone(model, tmp_path)


@pytest.mark.parametrize("form", ["Q4_1 GGUF", "bfloat16"])
def test_without_the_kernels_stored_weights_become_float32(form: str, tiny_model_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    """Where the kernels do not run (not built, or MLXCHAT_KERNELS=off), "auto" widens quantized and half-precision
    weights to float32 (MLX's own quantized matmul does not gain from batching on a CPU), and replies still
    equal the model alone."""
    from mlxchat.engine.cpu import kernels

    model = (bfloat16_copy(tiny_model_dir, tmp_path / "tiny-bf16") if form == "bfloat16"
             else write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1"))
    monkeypatch.setenv(kernels.OFF_VARIABLE, "off")
    kernels.status.cache_clear()
    try:
        loaded = load_model(str(model), LoadOptions(cache_dir=models_cache_dir()))
        assert loaded.dtype == "float32" and not loaded.weights.kernel_matmuls and not stored.holds_stored(loaded.model)
        assert {p.dtype for _, p in tree_flatten(loaded.model.parameters())} == {mx.float32}
        assert_batched_replies_equal_alone(model, tmp_path)
    finally:
        monkeypatch.delenv(kernels.OFF_VARIABLE)
        kernels.status.cache_clear()
