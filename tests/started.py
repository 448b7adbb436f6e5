"""An engine started as the app starts one: `load_model` on a worker thread, a fresh object, the engine on its own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any


def start_as_the_app(folder: Path, cache_dir: Path, parallel: int = 4, ctx_size: int = 512,
                     prefill_chunk: int = 4, kv_dtype: str = "auto", int8_activations: bool = False) -> Any:
    """load_model and the engine's start on a worker thread, as app.session.start does; the engine or the error.
    `kv_dtype` and `int8_activations`: the settings, as the app passes them."""
    from mlxchat.engine.loading.models import LoadOptions, load_model
    from mlxchat.engine.plan import SlotRequest
    from mlxchat.engine.local_engine import Engine

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            how = LoadOptions(kv_dtype=kv_dtype, int8_activations=int8_activations, cache_dir=cache_dir)
            loaded = load_model(str(folder), how)
            request = SlotRequest(parallel, ctx_size, parallel_max=8, per_slot_floor=64, per_slot_min=32)
            plan = loaded.facts.evaluate(request)  # K/V stored as the app stores them
            box["engine"] = Engine(loaded.ready, plan, prefill_chunk=prefill_chunk,
            )
        except Exception as exc:
            box["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["engine"]
