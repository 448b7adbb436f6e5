"""Images to a server: a chat's image parts as OpenAI's `image_url` parts (base64 data URLs), and whether a server's
error is its refusal of them.

PNG and JPEG go as they are: every server that takes images decodes them (llama-server's stb_image, vLLM's and
Ollama's Pillow or Go). Other kinds (WebP, GIF) go as a PNG of their first frame, which is what a local model sees
of them, because llama-server cannot decode WebP.
"""

from __future__ import annotations

import base64
import re
from io import BytesIO
from pathlib import Path
from typing import Any

AS_THEY_ARE = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
# A server's words when it will not take an image: llama-server without --mmproj ("image input is not supported"),
# mlx_lm.server ("Only 'text' content type is supported."), vLLM ("... is not a multimodal model"). Words about an
# image that it could not decode ("Failed to load image") are not a refusal of images.
_ABOUT = re.compile(r"image|multimodal|vision|content type", re.IGNORECASE)
_REFUSES = re.compile(r"not supported|unsupported|does not support|only supported|only 'text'|not a multimodal",
                      re.IGNORECASE)


class ImageUnreadable(Exception):
    """An image of the chat cannot be read to be sent; the message says which and what to change."""


def openai_content(content: list[Any]) -> list[Any]:
    """A message's parts as the API takes them: its images (`{"type": "image", "path": ...}`) as `image_url` parts
    with the image's bytes; text as it is."""
    return [{"type": "image_url", "image_url": {"url": data_url(Path(part["path"]))}}
            if isinstance(part, dict) and part.get("type") == "image" else part for part in content]


def data_url(path: Path) -> str:
    """The image at `path` as a data URL: PNG and JPEG as they are, another kind as a PNG of its first frame."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageUnreadable(f"the image {path.name} cannot be read ({exc.strerror or exc}): its copy in the data "
                              "folder is gone; take it off the message, or start a new chat") from None
    mime = AS_THEY_ARE.get(path.suffix.lower())
    if mime is None:
        from PIL import Image

        with Image.open(BytesIO(data)) as image:  # (a GIF's first frame: the one it opens on)
            out = BytesIO()
            image.convert("RGB").save(out, "PNG")
        data, mime = out.getvalue(), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def refuses_images(said: str) -> bool:
    """Whether a server's error, on a request with images, is its refusal of the images."""
    return _ABOUT.search(said) is not None and _REFUSES.search(said) is not None

