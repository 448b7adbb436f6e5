"""Writes a tiny random-weight image projector (llama.cpp's "mmproj" GGUF) for a tiny GGUF model, so that a real
llama-server started with `--mmproj` takes images: a CLIP vision tower and LLaVA's two-layer projector (llama.cpp's
projector type "mlp"), as llama.cpp's own loader (tools/mtmd/clip.cpp) reads them.

The tower reads a picture scaled to IMAGE_SIZE pixels square in PATCH-pixel patches: each image is
(IMAGE_SIZE // PATCH) ** 2 = 16 tokens of the model's prompt, whatever its size (LLaVA 1.5 pads it square first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

IMAGE_SIZE, PATCH = 32, 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2  # 16
WIDTH, FFN, LAYERS, HEADS = 32, 64, 2, 2  # the tower's


def write_tiny_mmproj(out_path: Path, text_width: int, seed: int = 0) -> Path:
    """Writes the projector to `out_path`; its output has `text_width` values a token (the model's hidden size)."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(out_path), "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.use_gelu", True)
    for key, value in (("embedding_length", WIDTH), ("feed_forward_length", FFN), ("block_count", LAYERS),
                       ("attention.head_count", HEADS), ("projection_dim", text_width),
                       ("image_size", IMAGE_SIZE), ("patch_size", PATCH)):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def random(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))

    random("v.patch_embd.weight", WIDTH, 3, PATCH, PATCH)
    random("v.position_embd.weight", IMAGE_TOKENS, WIDTH)
    for i in range(LAYERS):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            random(f"v.blk.{i}.{name}.weight", WIDTH, WIDTH)
            random(f"v.blk.{i}.{name}.bias", WIDTH)
        for name in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", np.ones(WIDTH, np.float32))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", np.zeros(WIDTH, np.float32))
        random(f"v.blk.{i}.ffn_up.weight", FFN, WIDTH)
        random(f"v.blk.{i}.ffn_up.bias", FFN)
        random(f"v.blk.{i}.ffn_down.weight", WIDTH, FFN)
        random(f"v.blk.{i}.ffn_down.bias", WIDTH)
    random("mm.0.weight", text_width, WIDTH)
    random("mm.0.bias", text_width)
    random("mm.2.weight", text_width, text_width)
    random("mm.2.bias", text_width)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path
