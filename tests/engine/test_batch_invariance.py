"""Batch invariance, path by path: one decode row's logits in a pass of its own and beside three other rows, bits
compared, for each way the CPU engine multiplies a model's weights (the model loaded as the app loads it, the pass
run by the engine's own forward over its slots).

- Weights kept as stored (4-bit, bfloat16) through mlxchat's compiled matmul (engine/cpu/kernels, weights_matmul):
  a row's sums do not depend on the rows beside it. The same bits.
- int8 rows (int8_activations = true): the same bits.
- float32 weights through the BLAS (mx.matmul on OpenBLAS or MKL, which choose their kernels and blocking by the
  number of rows): not promised. The difference is measured and bounded here, well under what would change a
  greedy token (the replies' tests check those are equal), and the README and `mlxchat doctor` say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.cpu import kernels
from mlxchat.engine.devices import device_kind
from mlxchat.engine.loading.models import LoadOptions, load_model
from mlxchat.engine.plan import SlotRequest
from mlxchat.engine.scheduler import SlotScheduler
from tests.engine.test_families import PROMPTS
from tests.engine.test_stored_weights import bfloat16_copy
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.skipif(device_kind() != "cpu", reason="the CPU's matmul paths")
needs_kernels = pytest.mark.skipif(not kernels.status().active, reason="the compiled kernels are not built here")


def row_alone_and_beside_others(loaded: Any) -> tuple[mx.array, mx.array]:
    """Slot 0's next-token logits from a decode pass of its own, and from one with slots 1-3 beside it."""
    request = SlotRequest(4, 4 * 64, parallel_max=8, per_slot_floor=64, per_slot_min=32)
    core = SlotScheduler(loaded.ready, loaded.facts.evaluate(request))
    for row, prompt in enumerate(PROMPTS):  # each slot's history read on its own
        core.forward.states(mx.array([prompt]), core.store.batch([row], len(prompt)))
        mx.eval(core.store.arrays)
        core.store.commit([row], [len(prompt)])
    step = mx.array([[p[-1]] for p in PROMPTS])  # (not committed: each pass writes the same position)
    alone = core.forward.logits(step[:1], core.store.batch([0], 1), None)[0]
    mx.eval(alone)
    beside = core.forward.logits(step, core.store.batch([0, 1, 2, 3], 1), None)[0]
    mx.eval(beside)
    return alone, beside


def loaded_as(form: str, tiny_model_dir: Path, tmp_path: Path) -> Any:
    if form == "bfloat16":
        bf16 = bfloat16_copy(tiny_model_dir, tmp_path / "tiny-bf16")
        return load_model(str(bf16), LoadOptions(cache_dir=models_cache_dir()))
    gguf = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
    return load_model(str(gguf), LoadOptions(int8_activations=form == "Q4_1, int8 rows", cache_dir=models_cache_dir()))


@needs_kernels
@pytest.mark.parametrize("form", ["bfloat16", "Q4_1", "Q4_1, int8 rows"])
def test_a_row_through_the_compiled_matmul_has_the_same_bits_beside_others(form: str, tiny_model_dir: Path,
                                                                           tmp_path: Path) -> None:
    loaded = loaded_as(form, tiny_model_dir, tmp_path)
    assert loaded.weights.kernel_matmuls and loaded.weights.int8_activations == (form == "Q4_1, int8 rows")
    alone, beside = row_alone_and_beside_others(loaded)
    assert mx.array_equal(alone, beside).item(), mx.abs(alone - beside).max().item()


def test_a_float32_row_through_the_blas_is_within_rounding_beside_others(tiny_model_dir: Path) -> None:
    """Measured, not promised bit for bit: BLAS libraries choose their kernel by the number of rows."""
    loaded = load_model(str(tiny_model_dir), LoadOptions(cache_dir=models_cache_dir()))
    assert loaded.dtype == "float32" and not loaded.weights.kernel_matmuls
    alone, beside = row_alone_and_beside_others(loaded)
    difference = mx.abs(alone - beside).max().item()
    print(f"float32 through the BLAS: a row's logits alone and beside three others differ by {difference:.2g}")
    assert difference <= 1e-5 * max(1.0, mx.abs(alone).max().item())
    assert mx.argmax(alone).item() == mx.argmax(beside).item()
