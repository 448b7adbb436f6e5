"""`mlxchat models`: which model families this build runs, how each layer kind is cached per slot, and the model's own."""

from __future__ import annotations

import sys
from typing import TextIO

from mlxchat.app.config.settings import Settings
from mlxchat.app.commands.console_progress import load_configured
from mlxchat.app.exit_codes import EXIT_USAGE



def run_models(settings: Settings, out: TextIO | None = None) -> int:
    """Prints the layer kinds and tested families, then the configured model's layers (or its refusal)."""
    out = out or sys.stdout
    # Imported here, after the CLI loaded the BLAS: the engine's cache stores import mlx.core.
    from collections import Counter

    from mlxchat.engine import (
        describe_families,
        format_bytes,
        layer_kinds,
        model_type,
        ModelLoadError,
        load_step,
    )

    for line in describe_families():
        print(line, file=out)
    try:
        loaded = load_configured(settings)
    except ModelLoadError as exc:
        print(f"model: {exc}", file=out)
        return 1 if load_step(exc) == "model" else EXIT_USAGE
    kinds = Counter(layer_kinds(loaded.model))
    layers = ", ".join(f"{n} x {kind}" for kind, n in kinds.items())
    print(f"model: {loaded.source.display_name} ({model_type(loaded.model)}): {layers}", file=out)
    kv = loaded.kv_footprint
    if kv is not None:
        windows = ", ".join(f"{format_bytes(b)}/token up to {w} tokens" for w, b in kv.windows) or "none"
        print(
            f"  per slot: full attention {format_bytes(kv.full_bytes_per_token)}/token; windows: {windows}; "
            f"recurrent state {format_bytes(kv.recurrent_bytes_per_slot)}",
            file=out,
        )
    return 0
