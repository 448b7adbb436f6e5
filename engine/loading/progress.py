"""What model loading reports while it works, and the error it raises: shared by the loader and the GGUF import."""

from __future__ import annotations

from dataclasses import dataclass


class ModelLoadError(Exception):
    """A model could not be found or loaded; the message says what the user should change."""


@dataclass(frozen=True)
class Progress:
    """One step of long work (hashing, converting, loading), for the CLI/TUI to display."""

    stage: str
    done: float
    total: float  # 0 when unknown
