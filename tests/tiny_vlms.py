"""Tiny random-weight vision-language models, built on the fly with mlx-vlm's own classes.

Each folder holds what a real one does: config.json, model.safetensors (saved from mlx-vlm's module, so its own
sanitizing reads it back), a byte-level BPE tokenizer with the family's image tokens, a chat template that writes
the family's image marker, and the processor's configuration (mlx-vlm's processor expands the marker into the
image's tokens), each family's from its spec in tests/vlm_specs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny_model import build_tokenizer
from tests.vlm_specs import FAMILIES, VOCAB


def build_tiny_vlm(path: Path, family: str, seed: int = 0) -> Path:
    """Writes a tiny `family` VLM folder at `path` (random float32 weights, scaled up a little so that greedy
    replies are peaked and differ by prompt) and returns it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map
    from mlx_vlm.utils import get_model_and_args, update_module_configs

    spec = FAMILIES[family]
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(VOCAB)
    tok.add_special_tokens(spec["tokens"])
    config = dict(spec["config"])
    config["image_token_index"] = config["image_token_id"] = tok.token_to_id(spec["image_token"])
    for name in ("vision_start", "vision_end", "video"):  # (Qwen-VL's other markers)
        token = tok.token_to_id(f"<|{name}_pad|>" if name == "video" else f"<|{name}|>")
        if token is not None:
            config[f"{name}_token_id"] = token
    for key, marker in spec.get("markers", {}).items():  # (a family's other markers, by the config key naming them)
        config[key] = tok.token_to_id(marker)
    config["eos_token_id"] = tok.token_to_id(spec["tokenizer"]["eos_token"])
    tok.save(str(path / "tokenizer.json"))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer_config = dict(spec["tokenizer"], tokenizer_class="PreTrainedTokenizerFast",
                            chat_template=spec["template"], model_max_length=4096)
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (path / "processor_config.json").write_text(json.dumps(spec["processor"], indent=2))
    (path / "preprocessor_config.json").write_text(json.dumps(spec["image_processor"], indent=2))

    module, _ = get_model_and_args(config)
    read = {"text_config": {}, **json.loads(json.dumps(config))}  # (as mlx-vlm's load reads the folder's config)
    model_config = update_module_configs(module.ModelConfig.from_dict(read), module, read, ["text", "vision"])
    mx.random.seed(seed)
    model = module.Model(model_config)
    scale = spec.get("scale", 3.0)
    model.update(tree_map(lambda p: p * scale if p.ndim > 1 else p, model.parameters()))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return path


def tiny_image(path: Path, seed: int = 0, size: tuple[int, int] = (40, 30)) -> Path:
    """A small PNG of random pixels (a different picture per seed)."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def mlx_vlm_alone(folder: Path, messages: list[dict], n: int = 8) -> tuple[list[int], int]:
    """mlx-vlm's own generate, greedy, on the chat as its processor reads it: (its tokens, its prompt's length)."""
    from mlx_vlm import generate, load

    vlm, processor = load(str(folder))
    images = [p["path"] for m in messages if isinstance(m["content"], list) for p in m["content"]
              if p["type"] == "image"]
    plain = [dict(m, content=[{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                              for p in m["content"]]) if isinstance(m["content"], list) else m for m in messages]
    prompt = processor.tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
    result = generate(vlm, processor, prompt, image=images, max_tokens=n, temperature=0.0, verbose=False)
    return list(result.token_ids), result.prompt_tokens


def without_pad_token(folder: Path) -> Path:
    """The tiny VLM in `folder` with no pad token in its tokenizer's configuration (as some models ship)."""
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "pad_token"}))
    return folder
