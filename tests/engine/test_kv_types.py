"""K/V stored as kv_dtype says (engine.kv.kv_types): the kernel reads each type as stored, every family gives in
four slots what mlx-lm gives alone over the same stored values, and the bytes are counted as stored.

The reference for a narrower type is mlx-lm alone with each new key and value rounded to that type by MLX's own
operations (astype; mx.quantize and mx.dequantize for q8) before its cache keeps them (test_families.rounded_caches):
never by the engine's KVType, whose bugs would then be the reference's too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlxchat.engine.cpu import kernels
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.kv.kv_types import KVType
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_families import PROMPTS, batched_logits_equal_alone, each_slot_equals_alone, generated, plan
from tests.engine.test_families import q8_parts, stored_by_mlx
from tests.engine.test_families import alone as families_alone
from tests.tiny_families import FAMILIES, build_family

NARROW = ("float16", "bfloat16", "q8")
NEW = 8
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
needs_kernels = pytest.mark.skipif(not kernels.status().active, reason="the compiled kernels are not built")


def q8_wide(family: str) -> dict[str, Any]:
    """Overrides that give `family`'s attention heads 32 dims, the narrowest q8 stores (the tiny ones have 16)."""
    config = FAMILIES[family]
    if family == "deepseek_v3":  # MLA caches its latent and the keys' rotary part
        return {"kv_lora_rank": 32, "qk_rope_head_dim": 32}
    wide = {"num_attention_heads": 2, "num_key_value_heads": 1} | {k: 32 for k in ("head_dim", "global_head_dim")
                                                                      if k in config}
    if family == "phi3_longrope":  # a factor per rotary frequency
        wide["rope_scaling"] = dict(config["rope_scaling"], short_factor=[1.0 + i / 16 for i in range(16)],
                                    long_factor=[1.0 + i / 8 for i in range(16)])
    return wide


def model_for(family: str, kv_dtype: str) -> Any:
    """`family`'s tiny model for K/V stored as `kv_dtype`; skips q8 where this device cannot read it (load refuses
    it there: test_q8_the_device_cannot_read_is_refused_at_load)."""
    from mlxchat.engine.kv.attention import q8_unreadable

    if kv_dtype == "q8" and (why := q8_unreadable(32)):
        pytest.skip(f"MLX here cannot read q8 K/V of 32-value heads: {why}")
    return build_family(family, **(q8_wide(family) if kv_dtype == "q8" else {}))


def alone(model: Any, prompt: list[int], kv_dtype: str) -> list[int]:
    return families_alone(model, prompt, NEW, kv_dtype)


@needs_kernels
@pytest.mark.parametrize("kv_dtype", NARROW)
@pytest.mark.parametrize(
    "heads, kv_heads, n_new, rows, lengths",
    [(4, 4, 1, [0, 1, 2], [5, 17, 64]), (6, 2, 1, [3, 0], [130, 1]), (4, 2, 37, [1], [300])],
)
def test_the_kernel_reads_each_type_as_stored(kv_dtype, heads, kv_heads, n_new, rows, lengths):
    import mlx.core as mx

    # Stored and widened by MLX's own operations (mx.quantize, astype), not by the engine's KVType.
    wide_k, wide_v = (mx.random.normal((4, kv_heads, 320, 64), key=mx.random.key(i)) for i in (1, 2))
    k, v = (q8_parts(x)[0] if kv_dtype == "q8" else [x.astype(getattr(mx, kv_dtype))] for x in (wide_k, wide_v))
    wide_k, wide_v = stored_by_mlx(wide_k, kv_dtype), stored_by_mlx(wide_v, kv_dtype)
    q = mx.random.normal((len(rows), heads, n_new, 64), key=mx.random.key(3))
    ext = kernels.status().module
    for threads in (1, 2):
        got = ext.slot_attention(q, list(k), list(v), mx.array(rows), mx.array(lengths), 0.25, threads)
        want = ext.slot_attention(q, [wide_k], [wide_v], mx.array(rows), mx.array(lengths), 0.25, threads)
        # The float types widen exactly: the same bits as over the widened copy. q8's q * scale + bias is fused
        # in the kernel, rounded once where MLX's dequantize rounds twice.
        same = mx.array_equal(got, want) if kv_dtype != "q8" else mx.allclose(got, want, atol=1e-5, rtol=1e-5)
        assert same.item(), (kv_dtype, mx.abs(got - want).max().item())
    # A row's result is the same whatever shares its pass.
    alone_row = ext.slot_attention(q[:1], list(k), list(v), mx.array(rows[:1]), mx.array(lengths[:1]), 0.25, 1)
    assert mx.array_equal(got[:1], alone_row).item()


@pytest.mark.parametrize("kv_dtype", NARROW)
@pytest.mark.parametrize("dim", [64, 32, 96])
def test_each_type_stores_what_mlx_itself_gives(kv_dtype, dim):
    """KVType's stored parts are MLX's own bits for the type: astype, or mx.quantize's values, scales and biases (the
    format mlx-lm's quantized attention reads), and they read back as mx.dequantize reads them."""
    import mlx.core as mx

    from mlxchat.engine.kv.kv_types import KVType

    x = 3 * mx.random.normal((2, 2, 7, dim), key=mx.random.key(4))
    kv = KVType(kv_dtype)
    stored = kv.encode(x)
    want = q8_parts(x)[0] if kv_dtype == "q8" else [x.astype(getattr(mx, kv_dtype))]
    assert len(stored.parts) == len(want)
    for got, part in zip(stored.parts, want):
        assert got.dtype == part.dtype and mx.array_equal(got, part).item()
    assert mx.array_equal(kv.decode(stored, mx.float32), stored_by_mlx(x, kv_dtype)).item()


@needs_kernels
def test_stored_types_the_kernel_cannot_read_are_refused():
    import mlx.core as mx

    ext = kernels.status().module
    q = mx.zeros((1, 2, 1, 32))
    w, scales, biases = mx.quantize(mx.zeros((1, 2, 4, 32)), group_size=32, bits=8)
    half = mx.zeros((1, 2, 4, 32), dtype=mx.float16)
    cases = [
        ([half], [half.astype(mx.bfloat16)], "k and v are float32, float16 or bfloat16, both alike"),
        ([w, scales], [w, scales], r"one array each, or \(values, scales, biases\)"),
        ([w, scales.astype(mx.float16), biases], [w, scales, biases], "float32 scales and biases"),
        ([half.astype(mx.int32)], [half.astype(mx.int32)], "k and v are float32, float16 or bfloat16"),
    ]
    for k, v, message in cases:
        with pytest.raises(ValueError, match=message):
            mx.eval(ext.slot_attention(q, k, v, mx.array([0]), mx.array([4]), 1.0, 1))


@pytest.mark.parametrize("kv_dtype", NARROW)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_pass_logits_over_stored_kv_equal_mlx_lm_alone(family, kv_dtype):
    """As test_families' logits test: rows at different offsets, a padded chunk and a decode pass, K/V stored."""
    check_batched_logits(family, kv_dtype)


@pytest.mark.parametrize("kv_dtype", NARROW)
@pytest.mark.parametrize("family", ["llama", "gemma3_text", "deepseek_v3"])
def test_without_the_kernel_mlx_reads_each_stored_type(family, kv_dtype, monkeypatch):
    """Where the compiled attention does not run (Metal, CUDA, no compiler), MLX's own attention reads the stored
    K/V: widened float types, mlx-lm's quantized attention for q8; writes go through MLX's scatter."""
    monkeypatch.setattr(kernels, "active_here", lambda: False)
    check_batched_logits(family, kv_dtype)


def check_batched_logits(family: str, kv_dtype: str) -> None:
    import mlx.core as mx

    # Rows at other offsets compute K/V a rounding apart; stored, the narrower type can round them to
    # neighbours (q8: a group's scale moves with its largest value). A wrong key is far beyond these.
    tolerance = {"float16": 1e-3, "bfloat16": 4e-3, "q8": 5e-3}[kv_dtype]
    store = batched_logits_equal_alone(model_for(family, kv_dtype), family, kv_dtype, tolerance)
    held = {a.dtype for a in store.arrays} - {mx.float32}  # (recurrent states and q8's scales stay float32)
    assert held <= {mx.float16, mx.bfloat16, mx.uint32} and (held or family == "mamba2")


@pytest.mark.parametrize("kv_dtype", NARROW)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_in_four_slots_over_stored_kv_equals_mlx_lm_alone(family, kv_dtype, tokenizer):
    model = model_for(family, kv_dtype)
    expected = [alone(model, p, kv_dtype) for p in PROMPTS]
    engine = Engine(ready_for_slots(model, tokenizer), plan_of(kv_dtype), prefill_chunk=4)
    try:
        each_slot_equals_alone(engine, PROMPTS, expected, GREEDY, f"{family}, {kv_dtype}")
    finally:
        engine.shutdown()


def plan_of(kv_dtype: str, parallel: int = 4) -> Any:
    from dataclasses import replace

    return replace(plan(parallel=parallel), kv_type=KVType(kv_dtype))


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def test_heads_q8_cannot_group_are_refused_at_load(tiny_model_dir: Path):
    from mlxchat.engine.loading.models import ModelLoadError, LoadOptions, load_model

    with pytest.raises(ModelLoadError, match=r'kv_dtype = "q8" stores K/V in groups of 32 or 64 values, and this '
                                             r"model's attention heads have 16: use float16 or bfloat16"):
        load_model(str(tiny_model_dir), LoadOptions(kv_dtype="q8"))
    with pytest.raises(ModelLoadError, match="kv_dtype 'int4' is not one of: auto, float32, float16, bfloat16, q8"):
        load_model(str(tiny_model_dir), LoadOptions(kv_dtype="int4"))


def test_q8_the_device_cannot_read_is_refused_at_load(monkeypatch):
    """Where MLX's quantized attention cannot run (its CUDA build has no quantized_matmul for 32-value heads: seen
    on an H200, every reply ended in that error), load refuses q8, saying why and what to choose."""
    import mlx.core as mx

    from mlxchat.engine.kv.attention import q8_unreadable
    from mlxchat.engine.kv.kinds import model_footprint
    from mlxchat.engine.kv.kv_types import UnsupportedKV

    model = model_for("llama", "q8")
    cuda_error = ('[quantized_matmul] No implementation for problem shape: 4x4x32x2, transpose: true, activation: '
                  'float32, bits: 8, group size: 32, mode: "affine".')

    def quantized_matmul(*args, **kwargs):
        raise RuntimeError(cuda_error)

    monkeypatch.setattr(kernels, "active_here", lambda: False)  # (the kernel reads q8 on a CPU)
    monkeypatch.setattr(mx, "quantized_matmul", quantized_matmul)
    q8_unreadable.cache_clear()
    try:
        with pytest.raises(UnsupportedKV) as refused:
            model_footprint(model, KVType("q8"))
    finally:
        q8_unreadable.cache_clear()
    assert str(refused.value) == (f'kv_dtype = "q8": MLX on this device cannot read 8-bit K/V of this model\'s '
                                  f"32-value heads ({cuda_error}): use float16 or bfloat16")


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "q8"])
def test_parked_and_saved_kv_keep_their_type(kv_dtype, tokenizer, tmp_path):
    """A chat parked, then written to disk at quit, comes back in its stored type: no prefill, the same tokens."""
    import json
    import struct

    from mlxchat.engine.kv.disk import DiskTier

    model = model_for("llama", kv_dtype)
    chat_a, chat_b = PROMPTS[3], [(11 * j) % 200 + 40 for j in range(30)]
    key = f"tiny llama|kv {kv_dtype}"
    engine = Engine(ready_for_slots(model, tokenizer), plan_of(kv_dtype, parallel=1), disk=DiskTier(tmp_path, 2**30, key))
    try:
        engine.submit(0, tokens=chat_a, sampling=GREEDY).result(60)
        engine.clear(0)
        engine.submit(0, tokens=chat_b, sampling=GREEDY).result(60)
        again = chat_a + alone(model, chat_a, kv_dtype) + [5, 6, 7, 8]
        done = engine.submit(0, tokens=again, sampling=GREEDY).result(60)
        assert (done.stats.restored_from, done.stats.prefilled_tokens) == ("parked", 1 + 4)  # (the last reply token)
        assert generated(engine, 0, again) == alone(model, again, kv_dtype)[:-1]
    finally:
        engine.shutdown()  # every slot's KV to disk
    saved = sorted(tmp_path.glob("*/*.safetensors"))
    assert saved
    head = saved[0].read_bytes()
    header = json.loads(head[8 : 8 + struct.unpack("<Q", head[:8])[0]])
    stored = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert stored == ({"U32", "F32"} if kv_dtype == "q8" else {"BF16"})

    restarted = Engine(ready_for_slots(model, tokenizer), plan_of(kv_dtype, parallel=1), disk=DiskTier(tmp_path, 2**30, key))
    try:
        done = restarted.submit(0, tokens=again + [9], sampling=GREEDY).result(60)
        assert done.stats.restored_from == "disk" and done.stats.prefilled_tokens < 8
        assert generated(restarted, 0, again + [9]) == alone(model, again + [9], kv_dtype)[:-1]
    finally:
        restarted.shutdown()


def test_each_type_is_counted_as_stored(tiny_model_dir: Path, tokenizer):
    """The bytes a token takes, by load_model, the plan and the engine's buffers; saved KV of another type is
    another model key (its files are not read)."""
    import mlx.core as mx

    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.kv.kinds import model_footprint
    from mlxchat.engine.loading.models import LoadOptions, load_model
    from mlxchat.engine.plan import SlotRequest

    # tiny llama: 2 layers x (K + V) x 2 KV heads x 16 dims.
    dtypes = ("float32", "float16", "bfloat16")
    per_token = {t: load_model(str(tiny_model_dir), LoadOptions(kv_dtype=t)) for t in dtypes}
    assert {t: m.kv_bytes_per_token for t, m in per_token.items()} == {
        "float32": 2 * 2 * 2 * 16 * 4, "float16": 2 * 2 * 2 * 16 * 2, "bfloat16": 2 * 2 * 2 * 16 * 2}
    assert len({m.kv_key for m in per_token.values()}) == 3
    plan = per_token["float16"].facts.evaluate(SlotRequest(4, 1024, per_slot_floor=64, per_slot_min=32))
    assert (plan.kv_type, plan.kv_bytes) == (KVType("float16"), 1024 * 2 * 2 * 2 * 16 * 2)
    assert plan.kv_summary == "256.0 KiB (64.0 KiB per slot) · float16, 256 B a token"
    # q8 on 32-dim heads: one byte a value, a float32 scale and bias per group of 32.
    model = model_for("llama", "q8")  # 2 layers, 1 KV head of 32
    assert model_footprint(model, KVType("q8")).bytes_per_token == 2 * 2 * (32 + 2 * 4)
    engine = Engine(ready_for_slots(model, tokenizer), plan_of("q8"))
    try:
        engine.submit(0, tokens=PROMPTS[0], sampling=GREEDY).result(60)
        assert engine.snapshot().kv_bytes_allocated == 512 * 2 * 2 * (32 + 2 * 4)  # 4 slots of 128
        assert {a.dtype for a in engine.core.store.arrays} == {mx.uint32, mx.float32}
    finally:
        engine.shutdown()


@needs_kernels
@pytest.mark.parametrize("stored", ["float32", "float16", "bfloat16"])
def test_a_decode_write_equals_mlx_cast_and_scatter_and_takes_the_buffer_over(stored):
    """The kernel's write of a decode pass's rows: the bits MLX's astype and scatter give (ties, subnormals, infinities
    and NaN included), rows out of the buffer left alone, and no second buffer where nothing else holds the first."""
    import mlx.core as mx

    ext = kernels.status().module
    dtype = getattr(mx, stored)
    slots, heads, capacity, dim = 3, 2, 40, 24
    buffers = [mx.random.normal((slots, heads, capacity, dim), key=mx.random.key(i)).astype(dtype) for i in (1, 2)]
    special = mx.array([1 + 2**-11, 1 + 3 * 2**-11, 2**-20, -(2**-24), 70000.0, float("inf"), float("nan"), 1 + 2**-8])
    new = [mx.random.normal((2, heads, 1, dim), key=mx.random.key(i)) for i in (3, 4)]
    new[0] = mx.where(mx.arange(dim) < 8, mx.pad(special, (0, dim - 8)), new[0])  # rounding's edge cases
    at = (mx.array([[2], [0]]) * heads + mx.arange(heads)) * capacity + mx.array([[7], [39]])
    at = mx.where(mx.array([[True, True], [True, False]]), at, slots * heads * capacity)  # one row out of range
    want = []
    kept = mx.array([0, 1, 2])  # (B x heads rows: the last is out of range)
    for buffer, rows in zip(buffers, new):
        flat = mx.array(buffer).reshape(-1, dim)
        flat[at.flatten()[kept]] = rows.reshape(-1, dim)[kept].astype(dtype)
        want.append(flat.reshape(buffer.shape))
    mx.eval(buffers, new, want)
    got = [ext.kv_write(buffer, rows, at) for buffer, rows in zip(buffers, new)]
    for g, w in zip(got, want):  # compared as bits: NaN too
        assert g.dtype == dtype and mx.array_equal(g.view(mx.uint8), w.view(mx.uint8)).item()
    # Nothing else holds the buffers: the write reuses their memory.
    big = [mx.zeros((8, 4, 4096, 64), dtype) + 1]  # (mx.zeros alone is one broadcast value)
    row = mx.ones((1, 4, 1, 64))
    mx.eval(big, row)
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    written = ext.kv_write(big.pop(), row, mx.arange(4).reshape(1, 4))
    mx.eval(written)
    assert mx.get_peak_memory() - before < written.nbytes / 4


@needs_kernels
def test_writes_the_kernel_cannot_serve_are_refused():
    import mlx.core as mx

    ext = kernels.status().module
    buffer, row = mx.zeros((2, 2, 8, 16)), mx.zeros((1, 2, 1, 16))
    cases = [
        ((buffer.astype(mx.int32), row, mx.zeros((1, 2))), "float32, float16 or bfloat16"),
        ((buffer, row.astype(mx.float16), mx.zeros((1, 2))), r"\(B, heads, 1, dim\) float32"),
        ((buffer, row, mx.zeros((1, 3))), r"at is \(B, heads\)"),
        ((buffer, mx.zeros((1, 2, 2, 16)), mx.zeros((1, 2))), r"\(B, heads, 1, dim\)"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            mx.eval(ext.kv_write(*args))


@pytest.mark.parametrize("kv_dtype", NARROW)
def test_a_repartition_keeps_a_slots_stored_kv(kv_dtype, tokenizer):
    """Full and window layers (gemma3_text) copied to another plan in their stored type: the next turn reads them."""
    from dataclasses import replace

    model = model_for("gemma3_text", kv_dtype)
    engine = Engine(ready_for_slots(model, tokenizer), plan_of(kv_dtype), prefill_chunk=4)
    try:
        engine.submit(0, tokens=PROMPTS[2], sampling=GREEDY).result(60)
        bigger = replace(plan(parallel=2, ctx_size=512), kv_type=KVType(kv_dtype))
        assert engine.repartition(bigger).result(60)[0] is True
        again = PROMPTS[2] + alone(model, PROMPTS[2], kv_dtype) + [5, 6, 7]
        done = engine.submit(0, tokens=again, sampling=GREEDY).result(60)
        assert done.stats.cached_tokens == len(PROMPTS[2]) + NEW - 1
        assert generated(engine, 0, again) == alone(model, again, kv_dtype)[:-1]
    finally:
        engine.shutdown()
