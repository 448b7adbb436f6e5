"""Where the Hugging Face cache is: the one place mlxchat looks for Hub models and downloads them to."""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache_dir() -> Path:
    """The Hugging Face cache as huggingface_hub finds it, read now (its own constants are read once at import)."""
    if hub := os.environ.get("HF_HUB_CACHE"):
        return Path(hub).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"
