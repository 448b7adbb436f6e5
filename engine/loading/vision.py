"""Vision-language models through mlx-vlm: its model modules, processors and weight sanitizing, no port of ours.

A folder whose config names a vision tower (`vision_config`) loads with `mlx_vlm.utils.load`. The slots run its
language model like any text model (`SlotModel`: mlx-lm's call, caches and layers); its vision tower and projector
run during prefill, through the model's own `get_input_embeddings` (engine.prefill.images).
mlx and mlx_vlm are imported inside functions, as engine.loading.models does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlxchat.engine.loading.progress import ModelLoadError

# What adds image support to an install: mlx-vlm itself (its own dependencies are mostly what mlx-lm already
# brings; the rest, a web server, datasets, opencv, audio, are for its other uses) and Pillow for its processors.
VISION_VERSION = "0.7.10"
INSTALL_VISION = f"pip install --no-deps mlx-vlm=={VISION_VERSION} pillow"

# Language models that keep a prompt's image positions on the model object (Qwen-VL's mRoPE deltas), one
# sequence at a time: slots would need them per slot, row by row.
_ONE_SEQUENCE_STATE = ("_rope_deltas", "_position_ids")


def is_vision_config(config: dict[str, Any]) -> bool:
    """Whether a model folder's config describes a vision-language model (a vision tower beside its language model)."""
    return isinstance(config.get("vision_config"), dict)


def vision_available() -> bool:
    """Whether mlx-vlm (and the Pillow its processors read images with) is installed."""
    try:
        import mlx_vlm  # noqa: F401
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def vision_missing(model_type: str) -> str:
    """What a user who loads a vision model without mlx-vlm is told."""
    return (f"This model ({model_type}) sees images, but mlx-vlm is not installed: it runs as a text model and "
            f"images are refused. To send it images, install it with: {INSTALL_VISION}")


class VisionParts:
    """The parts of a vision-language model that are not its language model: the whole mlx-vlm model (vision
    tower, projector, its `get_input_embeddings`) and its processor. A plain object, so that a SlotModel's
    parameters are its language model's alone (conversions and kernels touch those only)."""

    def __init__(self, vlm: Any, processor: Any) -> None:
        self.vlm = vlm
        self.processor = processor
        self.model_type: str = vlm.config.model_type
        self.runs = 0  # how many times the vision tower has read images (engine.prefill.images)


def _slot_model_class() -> type:
    import mlx.nn as nn

    class SlotModel(nn.Module):
        """A vision-language model's language model as the slots run a text model: `model(inputs, cache=...)` gives
        logits, `input_embeddings` takes the rows' embeddings in place of their tokens (an image's), `make_cache`
        gives mlx-lm's caches of the kinds mlx-vlm's own would be."""

        def __init__(self, parts: VisionParts) -> None:
            super().__init__()
            self.language_model = parts.vlm.language_model
            self.vision_parts = parts
            self.args = _Args(parts.model_type)

        @property
        def layers(self) -> list[Any]:
            return self.language_model.layers

        @property
        def attention_module(self) -> str:
            """The module whose `scaled_dot_product_attention` the layers call (engine.kv.attention.install)."""
            return type(self.language_model.layers[0].self_attn).__module__

        def make_cache(self) -> list[Any]:
            return [_mlx_lm_cache(c) for c in self.language_model.make_cache()]

        def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
            return self.language_model(inputs, inputs_embeds=input_embeddings, cache=cache).logits

    return SlotModel


class _Args:
    def __init__(self, model_type: str) -> None:
        self.model_type = model_type


def _mlx_lm_cache(cache: Any) -> Any:
    """mlx-lm's cache of the kind mlx-vlm's `cache` is (they keep the same protocol); another kind is returned as
    it is, and the slots refuse it by name (engine.loading.families)."""
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    kind = type(cache).__name__
    if kind == "KVCache":
        return KVCache()
    if kind == "RotatingKVCache":
        return RotatingKVCache(max_size=cache.max_size, keep=cache.keep)
    if kind == "ArraysCache":
        return ArraysCache(len(cache.cache))
    return cache


def load_vision(path: Path) -> tuple[Any, VisionParts]:
    """mlx-vlm's model and processor from `path`, as (the slots' model, its vision parts); ModelLoadError when
    mlx-vlm cannot load it or the slots cannot run its language model."""
    from mlx_vlm.utils import load

    try:
        vlm, processor = load(str(path))
    except (ValueError, OSError, KeyError, ImportError) as e:
        raise ModelLoadError(f"mlx-vlm could not load the vision model in {path}: {e}") from e
    parts = VisionParts(vlm, processor)
    kept = [name for name in _ONE_SEQUENCE_STATE if hasattr(vlm.language_model, name)]
    if kept:
        raise ModelLoadError(
            f"model type '{parts.model_type}' is not supported by mlxchat's engine with images: its language model "
            f"keeps one prompt's image positions on itself ({', '.join(kept)}, mRoPE), and the slots would need "
            "them per slot"
        )
    return _slot_model_class()(parts), parts
