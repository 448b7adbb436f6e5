"""What a chat database failure says to the user."""

from __future__ import annotations


class StoreError(Exception):
    """The chat database cannot be used; the message says why and is fit to show as it is."""


class StoreWriteError(StoreError):
    """A save failed (disk full, read-only, locked): what was not written is kept to be saved again."""
