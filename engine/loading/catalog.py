"""The models that can run here with no download: MLX folders in the Hugging Face cache, GGUF files converted before,
given .gguf files and the default; each with its size, kind (quantization) and trained context. Reads files only."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.engine.loading.hub_cache import hub_cache_dir
from mlxchat.engine.loading.models import folder_size, resolve_model
from mlxchat.engine.loading.progress import ModelLoadError

SAFETENSORS_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
GGUF_TYPE = re.compile(r"(?i)(?:^|[.\-_])((?:I?Q\d+(?:_[A-Z0-9]+)*)|F16|F32|BF16)$")  # "model.Q4_K_M" -> Q4_K_M


@dataclass(frozen=True)
class ModelEntry:
    """One model the picker offers: what to load it by (`spec`, as --model takes it; "" for the default), its
    name, where it comes from, its bytes on disk, its kind and the context it was trained on (None: unknown)."""

    spec: str
    name: str
    source: str  # "default" | "hub" | "converted" | "gguf"
    size_bytes: int
    kind: str  # "4-bit (group 64)", "bfloat16", "Q4_1"
    trained_ctx: int | None


def _config(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None


def _stored_dtype(folder: Path) -> str | None:
    """The type most of a folder's first weights file holds, from its safetensors header (no tensor is read)."""
    try:
        with next(iter(sorted(folder.glob("*.safetensors")))).open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    except (OSError, ValueError, StopIteration):
        return None
    dtypes = [t["dtype"] for name, t in header.items() if name != "__metadata__"]
    return SAFETENSORS_TYPES.get(max(set(dtypes), key=dtypes.count)) if dtypes else None


def _kind(config: dict[str, Any], folder: Path) -> str:
    """How a folder's weights are held: its quantization, else the float type its weights file stores."""
    quantization = config.get("quantization") or config.get("quantization_config") or {}
    if "bits" in quantization:
        return f"{quantization['bits']}-bit (group {quantization.get('group_size', '?')})"
    return _stored_dtype(folder) or str(config.get("torch_dtype") or config.get("dtype") or "unknown type")


def trained_context(config: dict[str, Any]) -> int | None:
    """The context a model was trained on, as its config says (a multimodal model's text part says it)."""
    for part in (config, config.get("text_config") or {}):
        found = part.get("max_position_embeddings") or part.get("context_length")
        if found:
            return int(found)
    return None


def _folder_entry(spec: str, name: str, source: str, folder: Path) -> ModelEntry | None:
    """A folder that mlx-lm can load (a config and weights), else None."""
    config = _config(folder)
    if config is None or not any(folder.glob("*.safetensors")):
        return None
    return ModelEntry(spec, name, source, folder_size(folder), _kind(config, folder), trained_context(config))


def _snapshot(repo: Path) -> Path | None:
    """The snapshot of a cached Hub repo that its `main` ref names, else its newest."""
    try:
        ref = (repo / "refs" / "main").read_text().strip()
        if (repo / "snapshots" / ref).is_dir():
            return repo / "snapshots" / ref
    except OSError:
        pass
    snapshots = [s for s in (repo / "snapshots").glob("*") if s.is_dir()]
    return max(snapshots, key=lambda s: s.stat().st_mtime, default=None)


def hub_models(hub_dir: Path) -> list[ModelEntry]:
    """The MLX models in a Hugging Face cache (`models--owner--name` with a config and weights)."""
    entries = []
    for repo in sorted(hub_dir.glob("models--*--*")):
        snapshot = _snapshot(repo)
        repo_id = repo.name.removeprefix("models--").replace("--", "/", 1)
        entry = _folder_entry(repo_id, repo_id, "hub", snapshot) if snapshot is not None else None
        entries += [entry] if entry is not None else []
    return entries


def gguf_entry(path: Path, source: str, converted_dir: Path, spec: str | None = None) -> ModelEntry:
    """A GGUF file as the picker lists it: its type from its name, its trained context from its conversion if
    mlxchat made one."""
    match = GGUF_TYPE.search(path.stem)
    config = next((c for f in sorted(converted_dir.glob(f"{path.stem}-*")) if (c := _config(f)) is not None), None)
    return ModelEntry(str(path) if spec is None else spec, path.stem, source, path.stat().st_size,
                      match.group(1).upper() if match else "GGUF", trained_context(config) if config else None)


def local_models(converted_dir: Path, ggufs: Sequence[Path], hub_dir: Path | None = None) -> list[ModelEntry]:
    """Every model that runs here with no download: the default (when installed), the .gguf files in `ggufs`
    (those opened before) that still exist, mlxchat's conversions of other GGUF files, and the Hub cache's models."""
    entries: list[ModelEntry] = []
    try:
        default = resolve_model(None)
        assert default.path is not None
        entries.append(gguf_entry(default.path, "default", converted_dir, spec=""))
    except ModelLoadError:
        default = None
    files = [p for p in dict.fromkeys(ggufs) if p.is_file() and (default is None or p != default.path)]
    entries += [gguf_entry(p, "gguf", converted_dir) for p in files]
    listed = {p.stem for p in files} | ({default.path.stem} if default and default.path else set())
    for folder in sorted(converted_dir.glob("*")):
        stem = folder.name.rsplit("-", 1)[0]
        entry = None if stem in listed else _folder_entry(str(folder), stem, "converted", folder)
        entries += [entry] if entry is not None else []
    return entries + hub_models(hub_dir or hub_cache_dir())
