"""The compiled CPU kernels: built here, equal to MLX's attention, batch-invariant; and the fallback path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlxchat.engine.cpu import kernels
from mlxchat.engine.events import SamplingParams
from tests.engine.test_family_matrix import PROMPTS, TINY, generated, save, start_as_the_app
from tests.engine.test_families import alone
from tests.markers import needs_cpu

pytestmark = needs_cpu  # the kernels are MLX primitives of the CPU

GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


def test_the_kernels_are_built_and_pass_their_self_test_on_this_machine():
    # gcc, g++ and cmake are on every machine the suite runs on: `make setup` must have built them.
    assert shutil.which("cmake") and shutil.which("g++")
    status = kernels.status()
    assert status.active, status.detail
    assert "compiled attention" in status.detail and "code path" in status.detail
    # Which loops int8 rows take is said too: the CPU's best (every path gives the same bits, test_int8_rows).
    path = status.module.int8_path()
    assert path in status.detail and path in ("AVX-512 VNNI", "AVX2", "portable")


def reference(q, k, v, rows, lengths, scale):
    """MLX's own attention, row by row, over each row's slot region (causal, new queries last)."""
    import mlx.core as mx

    outs = []
    for b, (row, length) in enumerate(zip(rows, lengths)):
        mask = "causal" if q.shape[2] > 1 else None
        outs.append(mx.fast.scaled_dot_product_attention(
            q[b : b + 1], k[row : row + 1, :, :length], v[row : row + 1, :, :length], scale=scale, mask=mask
        ))
    return mx.concatenate(outs)


@pytest.mark.parametrize(
    "heads, kv_heads, n_new, rows, lengths",
    [
        (4, 4, 1, [0, 1, 2], [5, 17, 64]),  # decode rows of different lengths, no grouping
        (6, 2, 1, [3, 0], [130, 1]),  # grouped-query attention, slots out of order
        (4, 2, 37, [1], [300]),  # a prefill chunk at an offset: causal inside, block edges uneven
        (8, 1, 9, [2, 0], [9, 75]),  # multi-query attention, a chunk starting at 0
    ],
)
def test_kernel_attention_equals_mlx(heads, kv_heads, n_new, rows, lengths):
    import mlx.core as mx

    slots, capacity, dim = 4, 320, 16
    k = mx.random.normal((slots, kv_heads, capacity, dim), key=mx.random.key(1))
    v = mx.random.normal((slots, kv_heads, capacity, dim), key=mx.random.key(2))
    q = mx.random.normal((len(rows), heads, n_new, dim), key=mx.random.key(3))
    want = reference(q, k, v, rows, lengths, 0.25)
    for threads in (1, 2):
        got = kernels.status().module.slot_attention(q, [k], [v], mx.array(rows), mx.array(lengths), 0.25, threads)
        assert mx.allclose(got, want, atol=2e-5, rtol=1e-4).item(), (threads, mx.abs(got - want).max().item())


def test_queries_keys_and_values_given_as_any_view_are_read_as_their_values():
    import mlx.core as mx

    k = mx.random.normal((2, 2, 64, 16), key=mx.random.key(1))
    q = mx.random.normal((2, 4, 16, 3), key=mx.random.key(3)).swapaxes(2, 3)  # last axis strided
    want = reference(q, k, k, [1, 0], [40, 3], 0.25)
    got = kernels.status().module.slot_attention(q, [k], [k], mx.array([1, 0]), mx.array([40, 3]), 0.25, 2)
    assert mx.allclose(got, want, atol=2e-5, rtol=1e-4).item()
    # Keys and values whose last axis is strided, still lazy when the op is built (their strides are
    # known only once evaluated).
    kt = mx.random.normal((2, 2, 16, 64), key=mx.random.key(4))
    k, v = kt.swapaxes(2, 3), (kt * 2).swapaxes(2, 3)
    want = reference(q, mx.array(k.tolist()), mx.array(v.tolist()), [1, 0], [40, 3], 0.25)
    got = kernels.status().module.slot_attention(q, [kt.swapaxes(2, 3)], [(kt * 2).swapaxes(2, 3)], mx.array([1, 0]),
                                                 mx.array([40, 3]), 0.25, 2)
    assert mx.allclose(got, want, atol=2e-5, rtol=1e-4).item(), mx.abs(got - want).max().item()


def test_rms_norm_equals_mlx_for_rows_and_views():
    import mlx.core as mx

    ext = kernels.status().module
    x = mx.random.normal((7, 96), key=mx.random.key(7)) * 3
    weight = mx.random.normal((96,), key=mx.random.key(8))
    for rows in (x, x[::2], mx.random.normal((96, 5), key=mx.random.key(9)).T):  # contiguous, strided, transposed
        got, want = ext.rms_norm(rows, weight, 1e-5), mx.fast.rms_norm(rows, weight, 1e-5)
        assert mx.allclose(got, want, atol=1e-5, rtol=1e-5).item(), mx.abs(got - want).max().item()


def test_add_rms_norm_gives_the_bits_of_the_add_and_the_norm_apart():
    import mlx.core as mx

    ext = kernels.status().module
    h = mx.random.normal((5, 96), key=mx.random.key(14)) * 3
    delta = mx.random.normal((96, 5), key=mx.random.key(15)).T  # a view, as attention's output can be
    weight = mx.random.normal((96,), key=mx.random.key(16))
    total, normed = ext.add_rms_norm(h, delta, weight, 1e-5)
    assert mx.array_equal(total, h + delta).item()
    assert mx.array_equal(normed, ext.rms_norm(h + delta, weight, 1e-5)).item()


def test_swiglu_equals_mlx_lm_s_over_the_whole_range_of_exp():
    import mlx.core as mx
    import mlx.nn as nn

    gate = mx.concatenate([mx.random.normal((4, 200), key=mx.random.key(12)) * 20, mx.array([[-100.0, 100.0] * 100])])
    up = mx.random.normal(gate.shape, key=mx.random.key(13))
    got, want = kernels.status().module.swiglu(gate, up), nn.silu(gate) * up
    assert mx.allclose(got, want, atol=1e-5, rtol=1e-5).item(), mx.abs(got - want).max().item()


@pytest.mark.parametrize("traditional, dims, scale", [(False, 32, 1.0), (True, 32, 0.25), (False, 16, 1.0)])
def test_rope_over_rows_equals_mlx(traditional, dims, scale):
    import mlx.core as mx
    import mlx.nn as nn

    from mlxchat.engine.cpu.layer_ops import Rope

    batch, length, heads, dim = 3, 5, 4, 32
    rows = mx.random.normal((batch * length, heads * dim), key=mx.random.key(10))
    module = nn.RoPE(dims, traditional=traditional, base=50000.0, scale=scale)
    as_heads = rows.reshape(batch, length, heads, dim).transpose(0, 2, 1, 3)
    for offset in (7, mx.array([0, 40, 3000])):
        offsets = mx.array([offset] * batch if isinstance(offset, int) else offset, mx.int32)
        keys = rows[:, : 2 * dim] * 3  # a layer's queries and keys, as one operation
        got, got_keys = Rope(module)([rows, keys], batch, [heads, 2], offset, lambda: offsets)
        assert mx.allclose(got, module(as_heads, offset=offset), atol=2e-5, rtol=1e-5).item()
        assert mx.array_equal(got_keys, Rope(module)([keys], batch, [2], offset, lambda: offsets)[0]).item()
        assert mx.allclose(got_keys, module(as_heads[:, :2] * 3, offset=offset), atol=6e-5, rtol=1e-5).item()


def test_llama3_rope_goes_through_the_kernel_and_others_keep_their_module():
    import mlx.core as mx
    from mlx_lm.models.rope_utils import Llama3RoPE, SuScaledRoPE

    from mlxchat.engine.cpu.layer_ops import Rope

    llama3 = Llama3RoPE(32, traditional=False, base=500000.0,
                        scaling_config={"factor": 8.0, "original_max_position_embeddings": 8192})
    rows = mx.random.normal((2 * 3, 2 * 32), key=mx.random.key(11))
    offsets = mx.array([5, 9000], mx.int32)
    got = Rope(llama3)([rows], 2, [2], offsets, lambda: offsets)[0]
    want = llama3(rows.reshape(2, 3, 2, 32).transpose(0, 2, 1, 3), offset=offsets)
    assert mx.allclose(got, want, atol=2e-4, rtol=1e-5).item(), mx.abs(got - want).max().item()
    scaled = SuScaledRoPE(32, max_position_embeddings=4096, original_max_position_embeddings=1024,
                          short_factor=[1.0] * 16, long_factor=[2.0] * 16)
    assert Rope(scaled)._inverse is None  # its own module: the kernel does not scale its output


def test_a_rows_result_is_bit_identical_whatever_shares_its_pass():
    import mlx.core as mx

    ext = kernels.status().module
    k = mx.random.normal((3, 2, 200, 32), key=mx.random.key(4))
    v = mx.random.normal((3, 2, 200, 32), key=mx.random.key(5))
    q = mx.random.normal((3, 4, 1, 32), key=mx.random.key(6))
    alone_row = ext.slot_attention(q[1:2], [k], [v], mx.array([1]), mx.array([150]), 0.2, 1)
    together = ext.slot_attention(q, [k], [v], mx.array([0, 1, 2]), mx.array([10, 150, 199]), 0.2, 2)
    assert mx.array_equal(together[1:2], alone_row).item()


def test_a_long_chunk_does_not_store_scores_of_length_times_positions():
    """A 512-token chunk at position 3,500: (L x S) float32 scores per head would be 7 MiB each."""
    import mlx.core as mx

    ext = kernels.status().module
    k = mx.zeros((1, 1, 4096, 64))
    q = mx.zeros((1, 8, 512, 64))
    mx.eval(k, q)
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(ext.slot_attention(q, [k], [k], mx.array([0]), mx.array([4000]), 0.125, 2))
    assert mx.get_peak_memory() - before < 3 * q.nbytes


def test_without_the_kernels_doctor_says_so_and_the_engine_still_equals_mlx_lm(tmp_path: Path, monkeypatch):
    from mlx_lm.utils import load_model as mlx_lm_load

    monkeypatch.setenv(kernels.OFF_VARIABLE, "off")
    kernels.status.cache_clear()
    try:
        assert not kernels.status().active
        assert kernels.status().detail.startswith("off (MLXCHAT_KERNELS=off)")
        folder = save(TINY["llama"], tmp_path / "llama")
        engine = start_as_the_app(folder, tmp_path / "cache")
        reference_model, _ = mlx_lm_load(folder)
        try:
            handles = [engine.submit(i, tokens=p, sampling=GREEDY) for i, p in enumerate(PROMPTS)]
            assert [h.result(120).error for h in handles] == [None] * len(PROMPTS)
            for i, p in enumerate(PROMPTS):
                assert generated(engine, i, p) == alone(reference_model, p, 8)[:-1]
        finally:
            engine.shutdown()
    finally:
        monkeypatch.delenv(kernels.OFF_VARIABLE)
        kernels.status.cache_clear()
    assert kernels.status().active


def test_doctor_names_the_path_that_runs(tiny_model_dir, capsys, monkeypatch):
    from mlxchat.app.cli import main

    def kernel_line() -> str:
        assert main(["doctor", "--model", str(tiny_model_dir)]) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("kernels"))

    assert "compiled attention" in kernel_line()
    monkeypatch.setenv(kernels.OFF_VARIABLE, "off")
    kernels.status.cache_clear()
    try:
        assert "off (MLXCHAT_KERNELS=off): MLX's own operations run" in kernel_line()
    finally:
        monkeypatch.delenv(kernels.OFF_VARIABLE)
        kernels.status.cache_clear()


def test_top_k_gives_each_rows_largest_first_ties_to_the_lower_index_and_never_a_nan():
    import mlx.core as mx

    ext = kernels.status().module
    x = mx.random.normal((5, 1003), key=mx.random.key(9))
    for k in (1, 40, 1003):
        values, ids = ext.top_k(x, k, 2)
        want = mx.argsort(-x, axis=-1)[:, :k]
        assert mx.array_equal(ids, want.astype(mx.uint32)).item()
        assert mx.array_equal(values, mx.take_along_axis(x, want, axis=-1)).item()
    # Rows alone give the same as rows together, on any number of threads.
    assert mx.array_equal(ext.top_k(x[3:4], 40, 1)[1], ext.top_k(x, 40, 2)[1][3:4]).item()
    ties = mx.array([[1.0, 3.0, 3.0, float("nan"), 2.0, 3.0, float("-inf"), 2.0, 0.5]])
    assert ext.top_k(ties, 5, 1)[1].tolist() == [[1, 2, 5, 4, 7]]
    assert ext.top_k(ties, 8, 1)[1].tolist() == [[1, 2, 5, 4, 7, 0, 8, 6]]
    for bad, message in (((ties, 0, 1), "k must be in 1..V"), ((ties, 10, 1), "k must be in 1..V"),
                         ((ties[0], 2, 1), r"x must be \(B, V\) float32")):
        with pytest.raises(ValueError, match=message):
            ext.top_k(*bad)


def test_arguments_a_kernel_cannot_serve_are_refused_and_the_process_goes_on():
    """Empty rows, a zero-sized axis, zero heads: each raises a ValueError naming it (under ASan the first was a heap
    overflow; the others divided by zero, and SIGFPE killed the process)."""
    import mlx.core as mx

    ext = kernels.status().module
    weight = mx.zeros((16, 64), dtype=mx.float16)
    cases = [
        (lambda: ext.weights_matmul(mx.zeros((0, 64)), [weight], 16, 0, False, 1)[0],
         r"x must have rows and columns \(M, K >= 1\)"),
        (lambda: ext.weights_matmul(mx.zeros((2, 64)), [mx.zeros((0, 64), dtype=mx.float16)], 16, 0, False, 1)[0],
         r"each weight must have rows \(N >= 1\)"),
        (lambda: ext.rms_norm(mx.zeros((3, 0)), mx.zeros((0,)), 1e-5), "D must be at least 1"),
        (lambda: ext.slot_attention(mx.zeros((1, 4, 1, 8)), [mx.zeros((1, 0, 4, 8))], [mx.zeros((1, 0, 4, 8))],
                                    mx.array([0]), mx.array([4]), 1.0, 1), "heads and head dims must be at least 1"),
        (lambda: ext.slot_attention(mx.zeros((1, 3, 1, 8)), [mx.zeros((1, 2, 4, 8))], [mx.zeros((1, 2, 4, 8))],
                                    mx.array([0]), mx.array([4]), 1.0, 1), "shapes do not match"),  # 3 heads over 2
        (lambda: ext.rope_rows([mx.zeros((4, 16))], 1, [0], mx.array([0], dtype=mx.int32), mx.ones((4,)), False, 1.0),
         r"rope_rows: x \(batch \* length, heads \* dim\) float32"),  # zero heads
        (lambda: ext.rope_rows([mx.zeros((4, 16)), mx.zeros((4, 8))], 1, [2, 2], mx.array([0], dtype=mx.int32),
                               mx.ones((4,)), False, 1.0), "one length and dim for all"),
        (lambda: ext.add_rms_norm(mx.zeros((2, 4)), mx.zeros((1, 4)), mx.ones((4,)), 1e-5)[0], "of one shape"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            mx.eval(call())
    # Alive, and the kernels still answer.
    assert ext.rms_norm(mx.ones((1, 4)), mx.ones((4,)), 0.0).tolist() == [[1.0, 1.0, 1.0, 1.0]]
