"""A decode step's llama layers as one compiled operation (engine/cpu/layer_stack.py): the bits of the layers one
operation each, for each way the weights and the K/V are held; passes it cannot serve take the layers apart; and
every argument the kernel cannot serve is refused in words."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.bench.step_profile import count_operations
from mlxchat.engine.cpu import kernels
from mlxchat.engine.loading.models import LoadOptions, load_model
from mlxchat.engine.plan import SlotRequest
from mlxchat.engine.scheduler import SlotScheduler
from tests.tiny_configs import VOCAB
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.skipif(not kernels.active_here(), reason="the compiled kernels do not run here")

PROMPTS = ([3, 9, 4, 7, 1, 8, 2], [5, 6], list(range(1, 40)))  # three slots, three lengths


def scheduler(model: Path, kv_dtype: str, int8: bool = False, weights: str = "auto") -> SlotScheduler:
    """The model loaded as the app loads it (on a worker thread, a fresh object), its slots each holding a prompt."""
    options = LoadOptions(weights_dtype=weights, kv_dtype=kv_dtype, int8_activations=int8, cache_dir=models_cache_dir())
    with ThreadPoolExecutor(1) as pool:
        loaded = pool.submit(load_model, str(model), options).result()
    core = SlotScheduler(loaded.ready, loaded.facts.evaluate(SlotRequest(parallel=3, ctx_size=3 * 256)))
    for slot, prompt in enumerate(PROMPTS):
        core.forward.states(mx.array([prompt]), core.store.batch([slot], len(prompt)))
        mx.eval(core.store.arrays)
        core.store.commit([slot], [len(prompt)])
    return core


def stacked(core: SlotScheduler, on: bool) -> SlotScheduler:
    """The core with its layer stack kept (on) or set aside: each decode step then takes the layers apart."""
    body = core.forward._bodies.__self__  # type: ignore[union-attr]
    if not on:
        body._stack = None
    return core


def decode(core: SlotScheduler, ids: list[int], steps: int = 3) -> tuple[list[mx.array], list[mx.array]]:
    """`steps` decode passes over slots `ids`: each pass's logits and the K/V they left; the slots back where they
    were. The second pass's K/V go in by evaluating the store alone (as a draft model's catch-up does)."""
    logits = []
    for step in range(steps):
        tokens = mx.array([[11 + step + 2 * i] for i in range(len(ids))])
        if step == 1:
            core.forward.states(tokens, core.store.batch(ids, 1))
            mx.eval(core.store.arrays)
        else:
            (out,) = core.forward.every_logits([(tokens, core.store.batch(ids, 1))])
            mx.eval(out, core.store.arrays)
            logits.append(out)
        core.store.commit(ids, [1] * len(ids))
    written = [bits(a) for a in core.store.arrays]
    for slot, prompt in enumerate(PROMPTS):
        core.store.rollback(slot, len(prompt))
    return logits, written


def bits(a: mx.array) -> np.ndarray:
    """A copy of an array's bits (numpy reads no bfloat16)."""
    return np.array(a.view({2: mx.uint16, 4: mx.uint32, 1: mx.uint8}[a.itemsize]))


def uses_stack(core: SlotScheduler, ids: list[int]) -> bool:
    (out,) = core.forward.every_logits([(mx.array([[1]] * len(ids)), core.store.batch(ids, 1))])
    return "LayerStack" in count_operations(out)


@pytest.mark.parametrize("form, kv_dtype, int8", [
    ("Q4_1", "float16", False), ("Q4_1", "bfloat16", False), ("Q4_1", "float32", False), ("Q8_0", "float16", False),
    ("Q4_1", "float16", True), ("F16", "float16", False)])
def test_a_decode_steps_layers_as_one_operation_give_the_bits_of_one_operation_each(
        tiny_model_dir: Path, tmp_path: Path, form: str, kv_dtype: str, int8: bool) -> None:
    """Each way apart in a core of its own: a stray write of either would show in its K/V. Three slots, then one."""
    model = write_tiny_gguf(tiny_model_dir, tmp_path / f"tiny-{form}.gguf", form)
    on, off = stacked(scheduler(model, kv_dtype, int8), True), stacked(scheduler(model, kv_dtype, int8), False)
    assert uses_stack(on, [0]) and not uses_stack(off, [0])
    for ids in ([0, 1, 2], [1]):
        (logits, written), (logits_apart, written_apart) = decode(on, ids), decode(off, ids)
        assert all(mx.array_equal(a, b).item() for a, b in zip(logits, logits_apart))
        # Every slot's every position: what the steps wrote (the second by the store's evaluation alone) and the rest.
        assert len(written) == len(written_apart)
        assert all(np.array_equal(a, b) for a, b in zip(written, written_apart))


def check(core: SlotScheduler, steps: int = 2) -> tuple[list[mx.array], list[mx.array]]:
    """`steps` checking passes as speculative decoding runs them (engine.speculation.verify): slot 1's decode row in
    a group of its own, slots 0 and 2 with drafts of 3 and 1 tokens after their last, right-padded, as chunks whose
    tokens attend one by one. Each pass's logits and the K/V they left; the slots back where they were."""
    logits = []
    for step in range(steps):
        groups = [(mx.array([[11 + step]]), core.store.batch([1], 1)),
                  (mx.array([[3 + step, 4, 5, 6], [7, 8 + step, 8, 8]]), core.store.batch([0, 2], 4, [4, 2], True))]
        out = core.forward.every_logits(groups)
        mx.eval(out, core.store.arrays)
        logits += out
        core.store.commit([1, 0, 2], [1, 4, 2])
    written = [bits(a) for a in core.store.arrays]
    for slot, prompt in enumerate(PROMPTS):
        core.store.rollback(slot, len(prompt))
    return logits, written


@pytest.mark.parametrize("form, kv_dtype", [("Q4_1", "float16"), ("Q8_0", "bfloat16")])
def test_a_checking_pass_of_drafts_goes_through_the_stack_with_the_bits_of_one_operation_each(
        tiny_model_dir: Path, tmp_path: Path, form: str, kv_dtype: str) -> None:
    """A checked draft's tokens are rows of their own at their positions, in the pass beside another slot's decode
    row: the stack takes them all, and gives the bits the layers apart give (speculation's exactness rests on
    those: test_speculation)."""
    model = write_tiny_gguf(tiny_model_dir, tmp_path / f"tiny-{form}.gguf", form)
    on, off = stacked(scheduler(model, kv_dtype), True), stacked(scheduler(model, kv_dtype), False)
    (logits, written), (logits_apart, written_apart) = check(on), check(off)
    assert [lg.shape for lg in logits] == [lg.shape for lg in logits_apart] == [(1, 1, VOCAB), (2, 4, VOCAB)] * 2
    assert all(mx.array_equal(a, b).item() for a, b in zip(logits, logits_apart))
    assert len(written) == len(written_apart)
    assert all(np.array_equal(a, b) for a, b in zip(written, written_apart))
    groups = [(mx.array([[1]]), on.store.batch([1], 1)), (mx.array([[1, 2]]), on.store.batch([0], 2, None, True))]
    assert all(count_operations(out)["LayerStack"] == 1 for out in on.forward.every_logits(groups))


def test_half_precision_embeddings_take_the_layers_one_operation_each(tiny_model_dir: Path, tmp_path: Path) -> None:
    """weights_dtype "keep" holds a GGUF's embeddings in float16: the stack takes float32 rows only."""
    core = scheduler(write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1"), "float16", weights="keep")
    assert not uses_stack(core, [0, 1, 2])
    logits, _ = decode(core, [0, 1, 2])
    assert all(mx.isfinite(lg).all().item() for lg in logits)


def test_a_slots_saved_state_keeps_what_it_held_while_steps_write_in_its_range(tiny_model_dir: Path,
                                                                               tmp_path: Path) -> None:
    """The stack writes the slots' K/V buffers in place: what the store keeps of a slot (store.save, for the parked
    store and the disk tier) must be a copy, not a view of them, or the steps after a rollback would change it."""
    core = scheduler(write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1"), "float16")
    saved, _ = core.store.save(2)
    arrays = [a for layer in saved for part in layer for a in part]
    held = [bits(a) for a in arrays]
    core.store.rollback(2, 5)  # (the next steps write at position 5 on: inside what was saved)
    assert uses_stack(core, [2])
    decode(core, [0, 1, 2])
    assert all(np.array_equal(bits(a), h) for a, h in zip(arrays, held))


def test_a_prompts_chunk_takes_the_layers_one_operation_each(tiny_model_dir: Path, tmp_path: Path) -> None:
    """(K/V stored as q8, in values, scales and biases, do too: test_kv_types runs the llama family so.)"""
    core = scheduler(write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1"), "float16")
    chunk = core.forward.every_logits([(mx.array([[1, 2], [3, 4], [5, 6]]), core.store.batch([0, 1, 2], 2))])
    kinds, layers = count_operations(chunk[0]), 2
    # A layer a time, 9 operations each: q, k and v with their RoPE, the K and V writes, attention, o, the residual
    # add with the next norm, gate and up with the SwiGLU, down, the add and norm.
    assert "LayerStack" not in kinds and "RopeRows" not in kinds
    assert (kinds["WeightsMatmul"], kinds["SlotAttention"], kinds["AddRmsNorm"]) == (4 * layers + 1, layers, 2 * layers)


def test_arguments_the_stack_cannot_serve_are_refused_in_words() -> None:
    ext = kernels.status().module
    h, slots, starts, norm = mx.zeros((1, 32)), mx.array([0], mx.int32), mx.array([0], mx.int32), mx.ones((32,))
    quantized = lambda rows, columns: list(mx.quantize(mx.zeros((rows, columns)), 32, 4))  # noqa: E731
    buffer = mx.zeros((1, 1, 8, 16), mx.float16)  # one slot, one K/V head of 16 dims, 8 positions
    # Two heads of 16: q (32 x 32), k and v (16 x 32), o (32 x 32), gate and up (64 x 32), down (32 x 64).
    layer = [norm, norm, mx.ones((2,)), *quantized(32, 32), *quantized(16, 32), *quantized(16, 32),
             *quantized(32, 32), *quantized(64, 32), *quantized(64, 32), *quantized(32, 64)]
    transposed = mx.zeros((4, 32), mx.uint32).T  # q's packed values as a strided view
    mx.eval(norm, layer, buffer, transposed)
    formats = [4, 32] * 4
    shape = dict(heads=2, kv_heads=1, head_dim=16, eps=1e-5, attention_scale=0.25, traditional=False, rope_scale=1.0)
    weights = ext.layer_stack_weights(norm, layer, **shape, formats=formats)
    kv, int8 = [buffer, buffer], [0] * 4
    held = sys.getrefcount(weights)
    out = ext.layer_stack(h, slots, starts, weights, kv, int8, 2)  # (the cases below are this one but for one thing)
    # A pass holds the weights by their C++ owner, not by a Python reference: its last release, on MLX's stream
    # thread once the pass ran, would take the GIL (a step waiting for the UI thread's screen update).
    assert sys.getrefcount(weights) == held
    mx.eval(out)
    refused_weights = [
        ((mx.ones((32,), mx.float16), layer), {}, "first_norm"),
        ((norm, layer), {"kv_heads": 3}, "heads a multiple of kv_heads"),
        ((norm, layer), {"kv_heads": 0}, "at least 1"),
        ((norm, layer), {"formats": formats[:-1]}, "formats"),
        ((norm, layer[:-1]), {}, "fewer arrays"),
        ((norm, layer + [norm]), {}, "more arrays"),
        ((norm, [mx.ones((8,)), *layer[1:]]), {}, "norm weights"),
        ((norm, [norm, norm, mx.ones((9,)), *layer[3:]]), {}, "inverse frequencies"),
        ((norm, layer), {"formats": [5, 16] + formats[2:]}, "bits"),
        ((norm, [*layer[:3], *quantized(48, 32), *layer[6:]]), {}, "q, k and v give"),
        ((norm, [*layer[:-3], *quantized(16, 64)]), {}, "o and down"),
        ((norm, layer), {"formats": [4, 64] + formats[2:]}, "group size"),
        ((norm, [*layer[:3], transposed, *layer[4:]]), {}, "row-contiguous"),
        ((norm + 1, layer), {}, "evaluated"),
    ]
    for (first, arrays), changed, says in refused_weights:
        mx.eval(arrays)
        with pytest.raises(ValueError, match=says):
            ext.layer_stack_weights(first, arrays, **{**shape, "formats": formats, **changed})
    refused_passes = [
        ((mx.zeros((1, 16)), slots, starts, weights, kv, int8), "h must be"),
        ((mx.zeros((1, 32), mx.float16), slots, starts, weights, kv, int8), "h must be"),
        ((h, mx.array([0, 1], mx.int32), starts, weights, kv, int8), "slots and starts"),
        ((h, slots, starts, weights, kv[:1], int8), "a K and a V buffer for each layer"),
        ((h, slots, starts, weights, kv, int8[:3]), "int8: one for each"),
        ((h, slots, starts, weights, kv, [0, 0, 0, 7]), "int8 must be"),
        ((h, slots, starts, weights, [mx.zeros((1, 1, 8, 16), mx.int32)] * 2, int8), "K and V"),
        ((h, slots, starts, weights, [buffer, mx.zeros((1, 1, 9, 16), mx.float16)], int8), "alike"),
        ((h, slots, starts, weights, [buffer, mx.zeros((1, 1, 8, 16), mx.float32)], int8), "alike"),
    ]
    for args, says in refused_passes:
        with pytest.raises(ValueError, match=says):
            ext.layer_stack(*args, 2)
    # Views (a broadcast h, strided slots) are read as their values, as their contiguous copies are.
    rows = mx.random.normal((1, 32), key=mx.random.key(1))
    wide, two = mx.broadcast_to(rows, (2, 32)), mx.array([0, 0, 0, 0], mx.int32)[::2]
    out = ext.layer_stack(wide, two, mx.array([1, 2], mx.int32), weights, kv, int8, 2)[0]
    want = ext.layer_stack(mx.array(np.array(wide)), mx.array([0, 0], mx.int32), mx.array([1, 2], mx.int32), weights,
                           kv, int8, 2)[0]
    assert mx.array_equal(out, want).item()
