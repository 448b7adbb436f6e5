"""How full a slot's context is, drawn as a bar of text (the chat status line and the inspector share it)."""

from __future__ import annotations


def usage_bar(used: int, capacity: int, width: int) -> str:
    """A bar `width` characters long, filled in proportion to `used` / `capacity`."""
    filled = min(width, round(width * used / capacity)) if capacity else 0
    return "█" * filled + "░" * (width - filled)
