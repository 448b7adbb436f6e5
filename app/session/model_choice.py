"""The models the picker offers (what runs here with no download) and the .gguf files mlxchat has run, remembered."""

from __future__ import annotations

import json
from pathlib import Path

from mlxchat.app import paths
from mlxchat.engine import ModelEntry, local_models

REMEMBERED = 50  # .gguf files kept in the list, the latest first


def opened_ggufs() -> list[Path]:
    """The .gguf files mlxchat has run, the latest first (none when the record is missing or unreadable)."""
    try:
        return [Path(p) for p in json.loads(paths.opened_models_file().read_text()).get("gguf", [])]
    except (OSError, ValueError, AttributeError):
        return []


def remember(spec: str | None) -> None:
    """Records a model that ran, if it is a .gguf file (best effort: the list is a convenience)."""
    if not spec or not spec.lower().endswith(".gguf"):
        return
    path = Path(spec).expanduser().resolve()
    kept = [str(path), *(str(p) for p in opened_ggufs() if p != path)][:REMEMBERED]
    record = paths.opened_models_file()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"gguf": kept}, indent=2))
    except OSError:
        pass


def offered_models() -> list[ModelEntry]:
    """What the picker lists: the default, .gguf files run before, mlxchat's conversions and the Hub cache's models."""
    return local_models(paths.models_cache_dir(), opened_ggufs())
