"""A chat's words read as words, never as an image: its texts' image markers held apart from the processor.

A vision model's processor takes every image marker in the rendered prompt (`[IMG]`, `<image>`,
`<start_of_image>`, `<|image_pad|>`...) for an image, wherever it came from: a user asking what `<image>` means in
HTML, or a reply that wrote `[IMG]`, would count one image too many and fail the chat. So before the chat template
runs, each run of markers in a message's text becomes as many copies of a spare special token (the tokenizer's pad
token where it can be, which no processor expands; held too where a text holds it) as the run has tokens read as
plain text; after the processor, those positions get those plain tokens, in the order of the messages (as chat
templates write them).
The prompt keeps its length, so the processor's other arrays (mask, positions) still fit it. A prompt that holds the
spare token elsewhere too cannot be told apart, and a tokenizer may have no spare: the chat is then refused, saying
which marker and what to change.
"""

from __future__ import annotations

import re
from typing import Any

# Config ids that name no image marker.
_NOT_MARKERS = ("bos_token_id", "eos_token_id", "pad_token_id")


class MarkerRefused(ValueError):
    """A chat whose texts hold an image marker that cannot be kept apart from its images; the message says which
    (a ValueError: what the app is told, counting a chat that the engine cannot read)."""


def image_markers(vlm_config: Any, processor: Any) -> list[str]:
    """The strings that the processor or the model reads as part of an image: the processor's own tokens
    (`image_token`, `boi_token`, `image_break_token`...) and those of the config's ids (`vision_start_token_id`...)."""
    tokenizer = processor.tokenizer
    names = {v for k, v in vars(processor).items() if k.endswith("_token") and isinstance(v, str) and v}
    for key in dir(vlm_config):
        value = getattr(vlm_config, key, None)
        if key.endswith(("_token_id", "_token_index")) and key not in _NOT_MARKERS and isinstance(value, int):
            token = tokenizer.convert_ids_to_tokens(value) if value < len(tokenizer) else None
            if token:
                names.add(token)
    return sorted(names)


def _spare(tokenizer: Any, markers: list[str]) -> str | None:
    """A special token to stand for a text's markers: the pad token, else the unknown one, else another added token;
    none that is a marker, begins or ends a text (mlx-vlm makes the end-of-text token the pad token where a model has
    none) or that the chat template writes."""
    template = str(tokenizer.chat_template or "")
    taken = {*markers, tokenizer.bos_token, tokenizer.eos_token}
    for token in [tokenizer.pad_token, tokenizer.unk_token, *sorted(tokenizer.get_added_vocab())]:
        if token and token not in taken and token not in template:
            return token
    return None


def _refused(marker: str) -> MarkerRefused:
    return MarkerRefused(f"this model reads '{marker}' as an image, and your chat's text holds it: write it "
                         "differently (e.g. with a space inside it) and send again.")


class HeldMarkers:
    """The markers found in a chat's texts, in order, each with the plain tokens it reads as (`hold`), and the
    spare token that stands for them in the processor's prompt until `restore`."""

    def __init__(self, markers: list[str], processor: Any) -> None:
        self.markers = markers
        self.tokenizer = processor.tokenizer
        self.spare = _spare(self.tokenizer, markers)
        self.found: list[str] = []  # the runs of markers met in the texts, in order
        self.plain: list[list[int]] = []  # each one's tokens as text
        # The spare token in a text (a reply may write it) is held as a marker is, so that every copy of it in the
        # prompt stands for a text's. Markers side by side are read as text together, as the tokenizer reads a run;
        # the longest first, so that `<image>` inside `<image_soft_token>` stays whole.
        held = sorted({*markers, *([self.spare] if self.spare else [])}, key=len, reverse=True)
        self._pattern = re.compile(f"(?:{'|'.join(map(re.escape, held))})+")

    def hold(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` with each marker in their texts replaced by the spare token, once a plain token."""
        held = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                content = self._text(content)
            elif isinstance(content, list):
                content = [dict(part, text=self._text(part["text"])) if part.get("type") == "text" else part
                           for part in content]
            held.append(dict(message, content=content))
        return held

    def _text(self, text: str) -> str:
        return self._pattern.sub(self._held, text) if self.markers else text

    def _held(self, found: re.Match[str]) -> str:
        marker = found.group(0)
        if not self.spare:
            raise _refused(marker)
        plain = self.tokenizer.encode(marker, add_special_tokens=False, split_special_tokens=True)
        self.found.append(marker)
        self.plain.append(plain)
        return self.spare * len(plain)

    def restore(self, ids: list[int]) -> list[int]:
        """The processor's `ids` with the spare token's positions given the held markers' plain tokens, in order;
        MarkerRefused where the prompt holds the spare token elsewhere too (which no family's template writes)."""
        if not self.plain:
            return ids
        spare = self.tokenizer.convert_tokens_to_ids(self.spare)
        plain = [t for p in self.plain for t in p]
        if ids.count(spare) != len(plain):  # (the template or the processor wrote the spare token too)
            raise _refused(self.found[0])
        tokens = iter(plain)
        return [next(tokens) if t == spare else t for t in ids]
