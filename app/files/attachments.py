"""Files given to a chat: read once as UTF-8 text (or refused, saying why), shown as chips, sent fenced and named."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlxchat.engine import format_bytes

BINARY_PROBE = 8192  # a NUL byte in the first bytes says "binary", as git and grep decide
_FENCE = re.compile(r"`{3,}")


class AttachmentError(Exception):
    """A file that cannot be attached; the message names it and says what to change."""


@dataclass(frozen=True)
class Attachment:
    """A file's text as attached to a user message: its shown name, where it was, its size, when, and its tokens."""

    name: str  # as the user picked it: relative to the working folder where it is under it
    path: str  # absolute
    size: int  # bytes
    text: str
    attached: str  # when (stored time)
    tokens: int | None = None  # its text to the loaded model (None: not counted, as for a server)
    # An image (app.files.images): its pixels' size; `path` is then its copy in the data folder, `text` empty.
    width: int | None = None
    height: int | None = None

    @property
    def is_image(self) -> bool:
        return self.width is not None

    def fenced(self) -> str:
        """The file as the model reads it: its name, then its text in a fence."""
        return f"{self.name}\n{self.block()}"

    def block(self) -> str:
        """Its text in a fence longer than any inside it."""
        longest = max((len(run) for run in _FENCE.findall(self.text)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{fence}\n{self.text.rstrip(chr(10))}\n{fence}"

    def record(self) -> dict[str, Any]:
        """The attachment as the chat database and exports keep it."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Attachment:
        return cls(**{k: record[k] for k in ("name", "path", "size", "text", "attached")}, tokens=record.get("tokens"),
                   width=record.get("width"), height=record.get("height"))

    @property
    def sizes(self) -> str:
        """"1.2 KiB · 312 tokens" (the tokens where counted)."""
        tokens = "" if self.tokens is None else f" · {self.tokens:,} token{'s' if self.tokens != 1 else ''}"
        return f"{format_bytes(self.size)}{tokens}"

    @property
    def label(self) -> str:
        """What its chip says: "notes.md · 1.2 KiB · 312 tokens", an image's with its pixels: "shot.png · 640×480 · …"."""
        pixels = f" · {self.width}×{self.height}" if self.is_image else ""
        return f"{self.name}{pixels} · {self.sizes}"


def shown_name(path: Path, folder: Path) -> str:
    """A path as the chip and the model see it: relative to `folder` where it lies under it, else absolute."""
    try:
        return str(path.resolve().relative_to(folder.resolve()))
    except ValueError:
        return str(path.resolve())


def read_attachment(path: Path, max_kb: int, folder: Path, when: str) -> Attachment:
    """The file at `path` as an attachment (attached `when`), or AttachmentError saying why it cannot be: a folder,
    a vanished or unreadable file, one over `max_kb` (attach_max_kb), a binary file or text that is not UTF-8."""
    name = shown_name(path, folder)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise AttachmentError(f"{name} is a folder: pick a file in it")
        if size > max_kb * 1024:
            raise AttachmentError(f"{name} is {format_bytes(size)}, over attach_max_kb = {max_kb} KiB: raise it in the "
                                  "config, or attach a part of the file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise AttachmentError(f"{name} no longer exists: pick it again where it is now") from None
    except PermissionError:
        raise AttachmentError(f"{name} cannot be read: permission denied") from None
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if b"\0" in data[:BINARY_PROBE]:
        raise AttachmentError(f"{name} is a binary file: only text files can be attached")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AttachmentError(f"{name} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): "
                              "save it as UTF-8 to attach it") from None
    return Attachment(name, str(path.resolve()), len(data), text, when)


def with_files(text: str, attachments: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message as the model reads it: each attached text file fenced and named, then what the user wrote;
    with images, the chat template's parts: each image (its saved copy), then that text."""
    attached = [Attachment.from_record(a) for a in attachments]
    files = [a.fenced() for a in attached if not a.is_image]
    text = "\n\n".join([*files, text]) if files else text
    images = [{"type": "image", "path": a.path} for a in attached if a.is_image]
    return [*images, {"type": "text", "text": text}] if images else text
