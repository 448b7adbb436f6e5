"""A quantized vision tower on the CPU: its 4-bit layers multiplied by the compiled kernels, not MLX's own quantized
matmul (which read a 1024-patch layer at 2 GFLOP/s), and its replies still mlx-vlm's alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxchat.engine.cpu.stored import StoredLinear
from tests.engine.test_vision import GREEDY, chat, engine_for, reply_tokens
from tests.markers import needs_cpu
from tests.tiny_vlms import build_tiny_vlm, mlx_vlm_alone, tiny_image

pytestmark = needs_cpu
FAMILY = "smolvlm"


def quantized_tower(path: Path) -> Path:
    """A tiny SmolVLM whose tower's and connector's layers (those whose input is a whole number of groups) are 4-bit, as mlx-vlm's
    conversion leaves a quantized model: the scales among the weights, the config's `quantization`."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_vlm.utils import load_model

    build_tiny_vlm(path, FAMILY)
    vlm = load_model(path)
    for name, part in vlm.children().items():
        if name != "language_model":
            nn.quantize(part, group_size=32, bits=4,
                        class_predicate=lambda _, m: isinstance(m, nn.Linear) and m.weight.shape[-1] % 32 == 0)
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(vlm.parameters())))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(config, quantization={"group_size": 32, "bits": 4})))
    return path


def test_a_quantized_tower_is_multiplied_by_the_kernels_and_its_reply_in_a_busy_slot_is_mlx_vlms(tmp_path):
    from mlxchat.engine.cpu import kernels
    from mlxchat.engine.loading.models import load_model

    if not kernels.active_here():
        pytest.skip("the compiled kernels do not run here")
    folder = quantized_tower(tmp_path / FAMILY)
    loaded = load_model(str(folder))
    vlm = loaded.model.vision_parts.vlm
    taken = [name for name, m in vlm.named_modules() if isinstance(m, StoredLinear)]
    # The tower's one layer's attention (q, k, v, out) and its MLP's first projection (fc2's 48 inputs are not groups
    # of 32), and the connector's projection.
    assert len(taken) == loaded.model.vision_parts.kernel_layers == 6, taken
    images = [tiny_image(tmp_path / f"shot{i}.png", seed=i, size=(56, 56)) for i in range(2)]
    chats = [chat(images[0], "What is this?"), chat(images[1], "Paris is the capital of France. What is this?")]
    wanted = [mlx_vlm_alone(folder, c)[0][:-1] for c in chats]
    engine = engine_for(loaded, parallel=2)
    try:
        dones = [h.result(60) for h in [engine.submit(i, c, sampling=GREEDY) for i, c in enumerate(chats)]]
        assert [d.error for d in dones] == [None, None]
        assert [reply_tokens(engine, i, d) for i, d in enumerate(dones)] == wanted
    finally:
        engine.shutdown()
