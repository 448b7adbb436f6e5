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

_RECURRENT = ("its recurrent layers use mlx-vlm's own cache ({}), not mlx-lm's, which the slots' recurrent state "
              "serves")

_ONE_SCALE = ("its language model (mlx-vlm's Ministral3) scales attention by the position of a pass's first row for "
              "every row (Llama 4 scaling, past original_max_position_embeddings), where each slot's row needs its "
              "own; mlx-lm's, which runs it as text, takes each row's")

_NO_PROCESSOR = ("mlx-vlm finds no processor for it and loads its tokenizer alone, which reads a prompt's text and "
                 "drops its images")

_SPLICED = ("mlx-vlm's module splices each image's features into the prompt as blocks of its own layout, so its "
            "embeddings do not line up one for one with the processor's tokens, as the slots' positions need")
# Families whose get_input_embeddings gives another number of rows than the prompt has tokens (seen with a tiny one).
SPLICING_FAMILIES = ("llava_next", "granite_vision")

_BOTH_WAYS = ("its language model attends both ways among an image's tokens (use_bidirectional_attention), which "
              "mlx-vlm reads in one pass with a mask of its own; the slots read a prompt causally, in chunks")

# Vision families checked in tests/engine/test_vision.py: in busy slots, token for token against mlx-vlm alone.
SEEING_FAMILIES = ("gemma3", "gemma4", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "mistral3", "pixtral",
                   "aya_vision", "smolvlm", "idefics3", "internvl", "kimi_vl", "kimi_k25", "glm4v", "glm_ocr",
                   "paddleocr_vl", "llava_onevision", "lfm2-vl")
# Families whose language model rotates by mRoPE positions that mlx-vlm keeps on it for one sequence, and that take
# them per row instead, from each slot (engine.kv.mrope).
MROPE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm_ocr", "paddleocr_vl")
# Refused at load there, with the reason (any other family is tried: the check at load and a probe image decide).
REFUSED_VISION = {
    "qwen3_5, qwen3_5_moe": _RECURRENT.format("update_window"),
    "mistral3 over a ministral3 language model, Ministral 3": _ONE_SCALE,
    "gemma4 with use_bidirectional_attention, the larger Gemma 4s": _BOTH_WAYS,
    "mistral_large3": _NO_PROCESSOR,
    "llava_next, granite_vision": _SPLICED,
    "llava": "mlx-vlm 0.7.10's processor passes the text's options (padding) to the image processor, which "
             "transformers 5 refuses: mlx-vlm alone fails the same way",
}

# Language models that keep a prompt's image positions on the model object (mRoPE deltas), one sequence at a time:
# refused unless their family is one that takes them per row from the slots instead (MROPE_FAMILIES).
_ONE_SEQUENCE_STATE = ("_rope_deltas", "_position_ids")


def images_note(parts: "VisionParts | None", refused: str | None) -> str:
    """What the inspector says of images for a model: whether this one sees (a vision model loaded through mlx-vlm)
    or why not (`refused`: its load's note), and which families see; "" for a text model."""
    seeing = ", ".join(SEEING_FAMILIES)
    if parts is not None:
        return f"this model sees ({parts.model_type}, through mlx-vlm) · the families that see: {seeing}"
    return f"{refused} The families that see: {seeing}." if refused else ""


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


class VisionRefused(ModelLoadError):
    """mlx-vlm loads the model, but the slots cannot run it with images; the message says why."""

    def __init__(self, model_type: str, reason: str) -> None:
        super().__init__(f"model type '{model_type}' is not supported by mlxchat's engine with images: {reason}")


class VisionParts:
    """The parts of a vision-language model that are not its language model: the whole mlx-vlm model (vision
    tower, projector, its `get_input_embeddings`) and its processor. A plain object, so that a SlotModel's
    parameters are its language model's alone (conversions and kernels touch those only)."""

    def __init__(self, vlm: Any, processor: Any) -> None:
        self.vlm = vlm
        self.processor = processor
        self.model_type: str = vlm.config.model_type
        self.runs = 0  # how many times the vision tower has read images (engine.prefill.images)
        self.slices = 0  # how many slices of those reads ran beside streaming slots (engine.prefill.tower)
        self.kernel_layers = 0  # layers outside the language model that the compiled kernels multiply
        # Each slot's mRoPE positions, where the language model rotates by them (Qwen-VL).
        self.positions = _slot_positions() if vlm.config.model_type in MROPE_FAMILIES else None


def _slot_model_class() -> type:
    import mlx.nn as nn

    class SlotModel(nn.Module):
        """A vision-language model's language model as the slots run a text model: `model(inputs, cache=...)` gives
        logits, `input_embeddings` takes the rows' inputs in place of their tokens (an image's embeddings and a
        family's own: engine.prefill.images.ImagePrompt.inputs_of), `make_cache` gives mlx-lm's caches of the kinds
        mlx-vlm's own would be."""

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
            from mlx_lm.models.cache import KVCache

            if not hasattr(self.language_model, "make_cache"):  # (full attention in every layer, as mlx-lm assumes)
                return [KVCache() for _ in self.layers]
            return [_mlx_lm_cache(c) for c in self.language_model.make_cache()]

        def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
            extra = {}
            positions = self.vision_parts.positions
            if positions is not None:  # (given, the model keeps no positions of its own)
                from mlxchat.engine.kv.mrope import rows_of

                extra["position_ids"] = positions.of_pass(*rows_of(cache, inputs.shape[0]), inputs.shape[1])
            return self.language_model(inputs, cache=cache, **(input_embeddings or {}), **extra).logits

    return SlotModel


class _Args:
    def __init__(self, model_type: str) -> None:
        self.model_type = model_type


def _slot_positions() -> Any:
    from mlxchat.engine.kv.mrope import SlotPositions

    return SlotPositions()


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


def process(parts: VisionParts, text: str, images: list[Any]) -> dict[str, Any]:
    """The processor's inputs for a rendered prompt and its images (paths or PIL images), as `mlx_vlm.generate`
    prepares them: input_ids, pixel_values, the mask, and a family's own arrays."""
    from mlx_vlm.utils import prepare_inputs, should_add_special_tokens

    return dict(prepare_inputs(parts.processor, images=images, prompts=[text], image_token_index=image_token(parts),
                               add_special_tokens=should_add_special_tokens(parts.model_type, parts.processor)))


def image_token(parts: VisionParts) -> int:
    """The id the processor writes at each of an image's positions."""
    config = parts.vlm.config
    return getattr(config, "image_token_index", None) or getattr(config, "image_token_id", None)


def _probe(parts: VisionParts, tokenizer: Any) -> None:
    """Reads a blank image through the chat template and the processor, as a chat will: ModelLoadError if they fail,
    or if the processor is the tokenizer alone (mlx-vlm's fallback where it finds none), which drops the image."""
    from PIL import Image

    if not hasattr(parts.processor, "tokenizer"):
        raise VisionRefused(parts.model_type, _NO_PROCESSOR)
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
    try:
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        process(parts, text, [Image.new("RGB", (32, 32))])
    except Exception as e:
        raise VisionRefused(parts.model_type, f"mlx-vlm's processor fails on an image here ({e})") from e


def _try_recurrent(model: Any) -> None:
    """A language model with recurrent layers reads a token with mlx-lm's caches, whose protocol the slots' recurrent
    state keeps (LFM2's convolutions do); VisionRefused where its layers ask them for more (Qwen 3.5's gated-delta
    layers call mlx-vlm's own)."""
    import mlx.core as mx

    cache = model.make_cache()
    if not any(type(c).__name__ == "ArraysCache" for c in cache):
        return
    try:
        mx.eval(model(mx.array([[0]]), cache=cache))
    except AttributeError as e:
        raise VisionRefused(model.vision_parts.model_type, _RECURRENT.format(e.name)) from e


def _tower_on_kernels(vlm: Any) -> int:
    """On a CPU where the compiled kernels run, the 4- and 8-bit and half-precision layers of everything but the
    language model (the tower, the projector) are multiplied by them (engine.cpu.stored.install), each call in
    float32 and its output in the tower's own dtype. MLX's own quantized matmul read an image's 1024 patches through
    a 768 x 3072 layer at 2 GFLOP/s in float32 (2.2 s) and slower in bfloat16 (17.9 s); the kernel at 175 (28 ms:
    AMD EPYC, 2 cores). Returns how many layers it took."""
    import mlx.nn as nn

    from mlxchat.engine.cpu.stored import install

    return sum(install(child, halves=True) for name, child in vlm.children().items()
               if name != "language_model" and isinstance(child, nn.Module))


def load_vision(path: Path, tokenizer: Any) -> tuple[Any, VisionParts]:
    """mlx-vlm's model and processor from `path`, as (the slots' model, its vision parts); ModelLoadError when
    mlx-vlm cannot load it, its processor cannot read an image, or the slots cannot run its language model."""
    from mlx_vlm.utils import load

    try:
        vlm, processor = load(str(path))
    except (ValueError, OSError, KeyError, ImportError) as e:
        raise ModelLoadError(f"mlx-vlm could not load the vision model in {path}: {e}") from e
    parts = VisionParts(vlm, processor)
    model = _slot_model_class()(parts)
    _try_recurrent(model)
    text = vlm.language_model.config
    if text.model_type == "ministral3" and (getattr(text, "rope_parameters", None) or {}).get("llama_4_scaling_beta"):
        raise VisionRefused(parts.model_type, _ONE_SCALE)
    if parts.model_type in SPLICING_FAMILIES:
        raise VisionRefused(parts.model_type, _SPLICED)
    if getattr(text, "use_bidirectional_attention", None):
        raise VisionRefused(parts.model_type, _BOTH_WAYS)
    kept = [name for name in _ONE_SEQUENCE_STATE if hasattr(vlm.language_model, name)]
    if kept and parts.positions is None:
        raise VisionRefused(parts.model_type, f"its language model keeps one prompt's image positions on itself "
                                              f"({', '.join(kept)}, mRoPE), and the slots would need them per slot")
    _probe(parts, tokenizer)
    parts.kernel_layers = _tower_on_kernels(vlm)  # (once the model is known to see: a refused one chats as text)
    return model, parts
