"""Images drawn in the chat, under the user's message, as the `pictures` setting says: where the terminal draws
pictures (kitty's graphics protocol or sixel, through textual-image), in coloured half blocks elsewhere where the
setting is "blocks"; otherwise, or without textual-image, the message's line for the image stands alone.

textual-image asks the terminal what it draws when it is first imported: it writes its queries and reads the answers
from stdin, which Textual reads itself once it runs. So `ask_terminal` runs before the app starts, once, and its
answer holds for the app's life. Unasked (tests, a pipe), the terminal draws no pictures.
"""

from __future__ import annotations

from pathlib import Path

from textual.widget import Widget

# How this terminal draws pictures, once asked: "tgp" (kitty's graphics protocol), "sixel", or None.
_drawing: str | None = None


def ask_terminal(way: str) -> str | None:
    """Asks the terminal, through textual-image's queries, which way it draws pictures ("tgp", "sixel"), or None
    where it draws none (half blocks are drawn only where the setting asks: the line says more) or textual-image is
    missing. Where the `pictures` setting `way` is "off", nothing is asked (in tmux 0.16-0.25 s less at start, on 2
    busy cores of an AMD EPYC: textual-image's import and its queries)."""
    if way == "off":
        return None
    try:
        import textual_image.widget  # noqa: F401  (measures the terminal's cells while stdin is still free)
        from textual_image import renderable
    except ImportError:
        return None
    global _drawing
    _drawing = {renderable.TGPImage: "tgp", renderable.SixelImage: "sixel"}.get(renderable.Image)
    return _drawing


def picture(path: str, way: str) -> Widget | None:
    """The image at `path` drawn as this terminal draws pictures, or in half blocks where it draws none and the
    `pictures` setting `way` is "blocks"; None where `way` is "off", nothing draws it, the file is gone, or
    textual-image is missing."""
    kind = None if way == "off" else _drawing or ("blocks" if way == "blocks" else None)
    if kind is None or not Path(path).is_file():
        return None
    try:
        from textual_image.widget import HalfcellImage, SixelImage, TGPImage
    except ImportError:
        return None
    return {"tgp": TGPImage, "sixel": SixelImage, "blocks": HalfcellImage}[kind](path, classes="user-picture")
