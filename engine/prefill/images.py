"""A chat with images as a vision model reads it: its tokens, keyed by the images' bytes, and its embeddings.

The chat template writes each image part's marker; mlx-vlm's `prepare_inputs` (the processor) expands each into
the image's tokens and reads the pixels, as `mlx_vlm.generate` does. In the slot's history an image's positions
hold ids made from a hash of its bytes (negative: never a vocabulary id), so a parked, saved or reused prefix
matches only the same image, and a later turn that keeps it reuses its K/V without running the vision tower again.
The tower runs during prefill, the first time a chunk reaches an image's positions; while other slots stream, a
slice at a time between their steps (engine.prefill.tower).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx

from mlxchat.engine.loading.vision import VisionParts, image_token, process
from mlxchat.engine.prefill.image_markers import HeldMarkers, image_markers
from mlxchat.engine.prefill.tower import TowerSlices, slice_tower_layers
from mlxchat.engine.reply_refusals import NO_IMAGES
from mlxchat.engine.requests import Submit, image_paths, prompt_of, template_kwargs

_KEY_SPACE = 2**30
# What get_input_embeddings may give besides the embeddings that the slots carry: a mask they make themselves,
# Qwen-VL's mRoPE positions (each slot's own: engine.kv.mrope, from `ImagePrompt.mrope`), Qwen3-VL's
# DeepStack features (added to the first layers' states at the image's positions) and Gemma 4's per-layer inputs
# (the image's positions take the pad token's): `ImagePrompt.inputs_of`.
_CARRIED = {"inputs_embeds", "attention_mask_4d", "position_ids", "rope_deltas", "visual_pos_masks",
            "deepstack_visual_embeds", "per_layer_inputs"}


def _key(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """The [start, end) runs of `token` in `ids`."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != token:
            continue
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


@dataclass
class ImagePrompt:
    """A prompt with images: the ids the model reads, the ids the slot keeps, and the inputs of its vision tower."""

    parts: VisionParts
    ids: list[int]  # as the processor wrote them
    keyed: list[int]  # the same, each image position an id keyed by its image's bytes
    runs: list[tuple[int, int]]  # where image tokens lie
    inputs: dict[str, Any]  # prepare_inputs' arrays (pixel_values, the mask, a family's own)
    _read: Any = field(default=None, repr=False)  # get_input_embeddings' output, once the tower has run
    _slices: TowerSlices | None = field(default=None, repr=False)  # the tower being read beside streaming slots

    def touches_images(self, start: int, end: int) -> bool:
        """Whether positions [start, end) hold any image token."""
        return any(s < end and start < e for s, e in self.runs)

    def inputs_of(self, start: int, end: int) -> dict[str, Any]:
        """The language model's inputs for positions [start, end) in place of their tokens: `inputs_embeds` (1,
        end - start, hidden), Gemma 4's per-layer inputs of those positions, and Qwen3-VL's DeepStack features of the
        image positions among them. The first call runs the vision tower over every image of the prompt (a ValueError
        where the family needs more)."""
        if self._read is None:
            self._take(self._tower())
        chunk = {"inputs_embeds": self._read.inputs_embeds[:, start:end]}
        if self._read.per_layer_inputs is not None:
            chunk["per_layer_inputs"] = self._read.per_layer_inputs[:, start:end]
        visual, deepstack = self._read.visual_pos_masks, self._read.deepstack_visual_embeds
        if deepstack is not None and self.touches_images(start, end):
            # (the features are the image positions' in order: those before `start` are skipped)
            before, inside = int(visual[0, :start].sum().item()), int(visual[0, start:end].sum().item())
            chunk["visual_pos_masks"] = visual[:, start:end]
            chunk["deepstack_visual_embeds"] = [layer[before : before + inside] for layer in deepstack]
        return chunk

    @property
    def tower_pending(self) -> bool:
        """Whether the vision tower has still to read the prompt's images."""
        return self._read is None

    def read_slice(self, seconds: float) -> bool:
        """Reads the images for about `seconds` (at least one layer of the tower) while other slots stream; whether
        they are read (engine.prefill.tower)."""
        if self._slices is None:
            slice_tower_layers(self.parts.vlm)
            self._slices = TowerSlices(self._tower)
        self.parts.slices += 1
        if not self._slices.advance(seconds):
            return False
        self._take(self._slices.result)
        return True

    def drop(self) -> None:
        """The request ended: a tower paused in the middle of its images ends there."""
        if self._slices is not None:
            self._slices.drop()

    def _tower(self) -> Any:
        inputs = dict(self.inputs)
        pixel_values, mask = inputs.pop("pixel_values"), inputs.pop("attention_mask", None)
        return self.parts.vlm.get_input_embeddings(mx.array([self.ids]), pixel_values, mask=mask, **inputs)

    def _take(self, out: Any) -> None:
        if out.inputs_embeds.shape[1] != len(self.ids):
            raise ValueError(f"model type '{self.parts.model_type}' gives {out.inputs_embeds.shape[1]} embeddings "
                             f"for a prompt of {len(self.ids)} tokens, which the slots cannot place")
        extra = [k for k, v in out.to_dict().items() if v is not None and k not in _CARRIED]
        if extra:
            raise ValueError(f"model type '{self.parts.model_type}' feeds its language model more than embeddings "
                             f"with an image ({', '.join(extra)}), which the slots cannot carry yet")
        self._read = out
        self.parts.runs += 1

    def mrope(self) -> tuple[list[list[int]], int]:
        """The prompt's multimodal RoPE positions as the model's `get_input_embeddings` gives them (mlx-vlm's
        `get_rope_index`, which needs no pixels): rows time, height, width, and the delta of every position after."""
        inputs = self.inputs
        position_ids, deltas = self.parts.vlm.language_model.get_rope_index(
            mx.array([self.ids]), inputs.get("image_grid_thw"), inputs.get("video_grid_thw"),
            inputs.get("attention_mask"))
        return [axis[0] for axis in position_ids.tolist()], int(deltas.reshape(-1)[0].item())


def image_prompt(parts: VisionParts, tokenizer: Any, messages: Any, kwargs: dict[str, Any]) -> ImagePrompt:
    """The prompt of a chat with images: rendered by the chat template (with `kwargs`: tools, the thinking switch),
    the markers expanded and the pixels read by the model's processor; the image markers in its texts read as text
    (engine.prefill.image_markers: MarkerRefused where they cannot be)."""
    paths = image_paths(messages)
    held = HeldMarkers(image_markers(parts.vlm.config, parts.processor), parts.processor)
    text = tokenizer.apply_chat_template(held.hold(list(messages)), add_generation_prompt=True, tokenize=False,
                                         **kwargs)
    inputs = process(parts, text, paths)
    ids = held.restore(inputs.pop("input_ids")[0].tolist())
    runs = _runs(ids, image_token(parts))
    keys = [_key(Path(p).read_bytes()) for p in paths]
    if len(runs) != len(keys):  # (a family that tiles an image into several runs: one key for them all)
        keys = [_key(b"".join(k.to_bytes(8, "little") for k in keys))] * len(runs)
    keyed = list(ids)
    n = 0
    for (start, end), key in zip(runs, keys):
        for i in range(start, end):
            keyed[i] = -1 - (key + n) % _KEY_SPACE
            n += 1
    return ImagePrompt(parts, ids, keyed, runs, inputs)


class NoImages(Exception):
    """A chat with images sent to a model that takes none."""


def request_prompt(vision: VisionParts | None, tokenizer: Any, submit: Submit) -> tuple[list[int], ImagePrompt | None]:
    """A request's prompt as the slot keeps it, and its images' inputs where it has any (`vision`: the model's);
    NoImages where it has images and the model takes none. A model that rotates by mRoPE gets the prompt's positions
    for the request's slot (which serves nothing at admission)."""
    positions = vision.positions if vision is not None else None
    if not image_paths(submit.messages):
        if positions is not None:
            positions.place(submit.handle.slot_id, None)
        return prompt_of(tokenizer, submit), None
    if vision is None:
        raise NoImages(NO_IMAGES)
    kwargs = template_kwargs(submit.sampling.thinking, submit.tools)
    images = image_prompt(vision, tokenizer, submit.messages or [], kwargs)
    if positions is not None:
        positions.place(submit.handle.slot_id, images.mrope())
    return images.keyed, images


def image_tokens(parts: VisionParts, tokenizer: Any, path: Path) -> int:
    """How many tokens the model reads for the image at `path`, counted by its own processor."""
    prompt = image_prompt(parts, tokenizer, [{"role": "user", "content": [{"type": "image", "path": str(path)}]}], {})
    return sum(e - s for s, e in prompt.runs)
