"""A tiny draft model for a tiny target (tests/tiny_model.py): the target's tokenizer files, and the target's weights
with its last layers left out, so that it guesses the target's next token often but not always."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def build_draft(target: Path, path: Path, layers: int = 1, noise: float = 0.0) -> Path:
    """Writes a draft of the tiny model at `target` to `path`: its first `layers` layers, its embeddings and head,
    with `noise` (a share of each weight's own scale) added to the layers' matrices."""
    import mlx.core as mx

    path.mkdir(parents=True, exist_ok=True)
    for f in target.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, path / f.name)
    config = json.loads((target / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}, indent=2))
    weights = mx.load(str(target / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    mx.random.seed(1)
    kept = {k: v + noise * mx.random.normal(v.shape) * mx.abs(v).mean() if v.ndim == 2 and ".layers." in k else v
            for k, v in kept.items()}
    mx.save_safetensors(str(path / "model.safetensors"), kept)
    return path
