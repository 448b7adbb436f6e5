"""The engine's public API: what the app (and any other caller) may use.

Every name is imported on first use, not here: on Linux the CLI must load its BLAS (load_blas)
before anything imports mlx.core, and `import mlxchat.engine` must stay that cheap. Names
whose module imports mlx.core (Engine, EngineInfo) load MLX when they are first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_NAMES: dict[str, str] = {
    # the engine and what it reports (importing these loads MLX)
    "Engine": "mlxchat.engine.local_engine",
    "EngineInfo": "mlxchat.engine.status",
    # events and snapshots crossing to the UI
    "Done": "mlxchat.engine.events",
    "EngineSnapshot": "mlxchat.engine.events",
    "Event": "mlxchat.engine.events",
    "FinishReason": "mlxchat.engine.events",
    "RequestStats": "mlxchat.engine.events",
    "SamplingParams": "mlxchat.engine.events",
    "SlotSnapshot": "mlxchat.engine.events",
    "SlotState": "mlxchat.engine.events",
    "TextDelta": "mlxchat.engine.events",
    # the slot plan (llama.cpp context semantics)
    "SlotPlan": "mlxchat.engine.plan",
    "SlotRequest": "mlxchat.engine.plan",
    "plan_slots": "mlxchat.engine.plan",
    # memory
    "MemoryCheck": "mlxchat.engine.memory",
    "MemoryInfo": "mlxchat.engine.memory",
    "check_memory": "mlxchat.engine.memory",
    "format_bytes": "mlxchat.engine.memory",
    "memory_info": "mlxchat.engine.memory",
    # models
    "LoadedModel": "mlxchat.engine.loading.models",
    "ModelSource": "mlxchat.engine.loading.models",
    "load_model": "mlxchat.engine.loading.models",
    "resolve_model": "mlxchat.engine.loading.models",
    "ModelLoadError": "mlxchat.engine.loading.progress",
    "Progress": "mlxchat.engine.loading.progress",
    # the device and its BLAS
    "BlasError": "mlxchat.engine.cpu.blas",
    "BlasInfo": "mlxchat.engine.cpu.blas",
    "blas_in_use": "mlxchat.engine.cpu.blas",
    "load_blas": "mlxchat.engine.cpu.blas",
    "remedy": "mlxchat.engine.cpu.blas",
    "cpu_summary": "mlxchat.engine.devices",
    "device_kind": "mlxchat.engine.devices",
    "device_name": "mlxchat.engine.devices",
    "release_thread_streams": "mlxchat.engine.devices",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))


if TYPE_CHECKING:  # what type checkers and editors see
    from mlxchat.engine.cpu.blas import BlasError, BlasInfo, blas_in_use, load_blas, remedy
    from mlxchat.engine.devices import cpu_summary, device_kind, device_name, release_thread_streams
    from mlxchat.engine.events import (
        Done,
        EngineSnapshot,
        Event,
        FinishReason,
        RequestStats,
        SamplingParams,
        SlotSnapshot,
        SlotState,
        TextDelta,
    )
    from mlxchat.engine.loading.models import LoadedModel, ModelSource, load_model, resolve_model
    from mlxchat.engine.loading.progress import ModelLoadError, Progress
    from mlxchat.engine.memory import MemoryCheck, MemoryInfo, check_memory, format_bytes, memory_info
    from mlxchat.engine.plan import SlotPlan, SlotRequest, plan_slots
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.status import EngineInfo
