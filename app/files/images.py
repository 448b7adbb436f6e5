"""Images given to a chat: read with Pillow for their size, kept as a content-addressed copy in the data folder (0600),
so a reopened chat still shows and sends them whatever became of the original."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlxchat.app.chats.private import private_folder, write_private
from mlxchat.app.files.attachments import Attachment, AttachmentError, shown_name
from mlxchat.engine import format_bytes

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")  # (a gif's first frame is what the model sees)
IMAGE_MAX_MB = 20


def is_image(path: Path) -> bool:
    """Whether `path` names an image file mlxchat can attach."""
    return path.suffix.lower() in IMAGE_SUFFIXES


def no_images(path: Path, folder: Path, why: str = "") -> str:
    """Why an image cannot be attached while the loaded model takes none (`why`: the engine's words, a server's)."""
    if why:
        return f"{shown_name(path, folder)} is an image, and {why}"
    return (f"{shown_name(path, folder)} is an image, and this model does not take images: alt+m switches to one "
            "that does (a vision model such as Gemma 3)")


def read_image(path: Path, folder: Path, when: str, store: Path) -> Attachment:
    """The image at `path` as an attachment (its copy kept in `store`, named by its bytes' SHA-256), or AttachmentError
    saying why it cannot be: vanished, unreadable, over IMAGE_MAX_MB, or not an image Pillow can open."""
    from io import BytesIO

    from PIL import Image, UnidentifiedImageError

    name = shown_name(path, folder)
    try:
        if path.stat().st_size > IMAGE_MAX_MB * 2**20:
            raise AttachmentError(f"{name} is {format_bytes(path.stat().st_size)}, over {IMAGE_MAX_MB} MiB: "
                                  "attach a smaller image")
        data = path.read_bytes()
    except FileNotFoundError:
        raise AttachmentError(f"{name} no longer exists: pick it again where it is now") from None
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}") from None
    try:
        with Image.open(BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError) as exc:
        raise AttachmentError(f"{name} is not an image Pillow can read ({exc})") from None
    private_folder(store)
    copy = store / (hashlib.sha256(data).hexdigest() + path.suffix.lower())
    if not copy.is_file():
        write_private(copy, data)
    return Attachment(name, str(copy), len(data), "", when, width=width, height=height)
