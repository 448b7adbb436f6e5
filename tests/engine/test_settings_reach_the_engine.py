"""Settings that decide how the model and its K/V are held, set as a user sets them (Settings, as the config file or
the environment give them) and checked in the engine the app starts: the slots' K/V type and bytes, the weights'
type."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from mlxchat.app.config.settings import Settings
from mlxchat.app.session.start import start_engine
from mlxchat.engine.cpu import kernels
from mlxchat.engine.events import SamplingParams
from tests.engine.test_families import PROMPTS
from tests.tiny_gguf import write_tiny_gguf

GREEDY = SamplingParams(max_tokens=4, ignore_eos=True)


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16"])
def test_kv_dtype_is_what_the_slots_of_the_engine_hold(kv_dtype, tiny_model_dir: Path):
    settings = Settings(model=str(tiny_model_dir), kv_dtype=kv_dtype, parallel=2, ctx_size=512)
    started = start_engine(settings, lambda progress: None)
    try:
        engine = started.engine
        engine.submit(0, tokens=PROMPTS[0], sampling=GREEDY).result(60)  # (the buffers are allocated on first use)
        assert {a.dtype for a in engine.core.store.arrays} == {getattr(mx, kv_dtype)}
        # The tiny llama's two layers, each a K and a V of its 2 slots x 2 heads x 256 tokens x 16 values.
        itemsize = 4 if kv_dtype == "float32" else 2
        assert engine.snapshot().kv_bytes_allocated == 2 * 2 * (2 * 2 * 256 * 16) * itemsize
    finally:
        started.engine.shutdown()


@pytest.mark.parametrize("setting, value, dtype", [
    ("weights_dtype", "bfloat16", "bfloat16"), ("weights_dtype", "float16", "float16"),
    ("int8_activations", True, "q4 (group 32), int8 activations"), ("int8_activations", False, "q4 (group 32)")])
def test_weights_dtype_and_int8_activations_are_how_the_engine_holds_the_weights(setting, value, dtype,
                                                                                tiny_model_dir: Path, tmp_path: Path):
    """weights_dtype and int8_activations (the latter on a 4-bit model, with the compiled kernels): the model's
    weights as the started engine holds them."""
    model = tiny_model_dir
    if setting == "int8_activations":
        if not kernels.status().active:
            pytest.skip("int8 rows are the compiled kernels'")
        model = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
    settings = Settings(model=str(model), parallel=2, ctx_size=512, **{setting: value})
    started = start_engine(settings, lambda progress: None)
    try:
        assert started.engine.snapshot().dtype == dtype
    finally:
        started.engine.shutdown()
