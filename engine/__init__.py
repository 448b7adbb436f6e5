"""The engine's public API: what the app (and any other caller) may use; tests/test_layout.py holds the app to it.

Every name is imported on first use, not here: on Linux the CLI must load its BLAS (prepare_mlx)
before anything imports mlx.core, and `import mlxchat.engine` must stay that cheap. Names
whose module imports mlx.core (load_model, RemoteEngine's) load MLX when they are first touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxchat.engine.door import lazy_names

# public name -> the module that defines it ("module:name" where the module calls it otherwise)
_NAMES: dict[str, str] = {
    # chat_engine
    "ChatEngine": "mlxchat.engine.chat_engine",
    # cpu.blas
    "blas_in_use": "mlxchat.engine.cpu.blas",
    "BlasError": "mlxchat.engine.cpu.blas",
    "BlasInfo": "mlxchat.engine.cpu.blas",
    "remedy": "mlxchat.engine.cpu.blas",
    # cpu.kernels
    "kernel_status": "mlxchat.engine.cpu.kernels:status",
    # devices
    "cpu_summary": "mlxchat.engine.devices",
    "device_kind": "mlxchat.engine.devices",
    "device_name": "mlxchat.engine.devices",
    "on_own_thread": "mlxchat.engine.devices",
    # events
    "Done": "mlxchat.engine.events",
    "EngineSnapshot": "mlxchat.engine.events",
    "Event": "mlxchat.engine.events",
    "ParkedSnapshot": "mlxchat.engine.events",
    "Part": "mlxchat.engine.events",
    "RequestStats": "mlxchat.engine.events",
    "SamplingParams": "mlxchat.engine.events",
    "SlotSnapshot": "mlxchat.engine.events",
    "TextDelta": "mlxchat.engine.events",
    "ToolCall": "mlxchat.engine.events",
    # forward
    "tunable": "mlxchat.engine.forward",
    "tune": "mlxchat.engine.forward",
    # loading.catalog
    "local_models": "mlxchat.engine.loading.catalog",
    "ModelEntry": "mlxchat.engine.loading.catalog",
    # loading.families
    "describe_families": "mlxchat.engine.loading.families:describe",
    "layer_kinds": "mlxchat.engine.loading.families",
    "model_type": "mlxchat.engine.loading.families",
    # loading.models
    "load_model": "mlxchat.engine.loading.models",
    "LoadedModel": "mlxchat.engine.loading.models",
    "LoadOptions": "mlxchat.engine.loading.models",
    "resolve_model": "mlxchat.engine.loading.models",
    # loading.progress
    "ModelLoadError": "mlxchat.engine.loading.progress",
    "Progress": "mlxchat.engine.loading.progress",
    # memory
    "check_memory": "mlxchat.engine.memory",
    "DEFAULT_DISK_KV_MB": "mlxchat.engine.memory",
    "DEFAULT_PARK_BUDGET_MB": "mlxchat.engine.memory",
    "format_bytes": "mlxchat.engine.memory",
    "memory_info": "mlxchat.engine.memory",
    # plan
    "ModelFacts": "mlxchat.engine.plan",
    "plan_slots": "mlxchat.engine.plan",
    "SlotPlan": "mlxchat.engine.plan",
    "SlotRequest": "mlxchat.engine.plan",
    # prefill.pacing
    "STALL": "mlxchat.engine.prefill.pacing",
    # remote.engine
    "RemoteEngine": "mlxchat.engine.remote.engine",
    # remote.server
    "api_and_root": "mlxchat.engine.remote.server",
    "describe_error": "mlxchat.engine.remote.server",
    "make_client": "mlxchat.engine.remote.server",
    "probe": "mlxchat.engine.remote.server",
    "ServerError": "mlxchat.engine.remote.server",
    # remote.state
    "remote_plan": "mlxchat.engine.remote.state",
    # requests
    "Messages": "mlxchat.engine.requests",
    # speculation.draft_load
    "describe_draft": "mlxchat.engine.speculation.draft_load",
    # speculation.notes
    "model_speculation": "mlxchat.engine.speculation.notes",
    # startup
    "EngineConfig": "mlxchat.engine.startup",
    "load_step": "mlxchat.engine.startup",
    "prepare_mlx": "mlxchat.engine.startup",
    "retire": "mlxchat.engine.startup",
    "start_local": "mlxchat.engine.startup",
    "StartedEngine": "mlxchat.engine.startup",
    "StartError": "mlxchat.engine.startup",
}

__all__ = sorted(_NAMES)


__getattr__, __dir__ = lazy_names(__name__, _NAMES)


if TYPE_CHECKING:  # what type checkers and editors see
    from mlxchat.engine.chat_engine import ChatEngine
    from mlxchat.engine.cpu.blas import blas_in_use, BlasError, BlasInfo, remedy
    from mlxchat.engine.cpu.kernels import status as kernel_status
    from mlxchat.engine.devices import (
        cpu_summary,
        device_kind,
        device_name,
        on_own_thread,
    )
    from mlxchat.engine.events import (
        Done,
        EngineSnapshot,
        Event,
        ParkedSnapshot,
        Part,
        RequestStats,
        SamplingParams,
        SlotSnapshot,
        TextDelta,
        ToolCall,
    )
    from mlxchat.engine.forward import tunable, tune
    from mlxchat.engine.loading.catalog import local_models, ModelEntry
    from mlxchat.engine.loading.families import (
        describe as describe_families,
        layer_kinds,
        model_type,
    )
    from mlxchat.engine.loading.models import load_model, LoadedModel, LoadOptions, resolve_model
    from mlxchat.engine.loading.progress import ModelLoadError, Progress
    from mlxchat.engine.memory import (
        check_memory,
        DEFAULT_DISK_KV_MB,
        DEFAULT_PARK_BUDGET_MB,
        format_bytes,
        memory_info,
    )
    from mlxchat.engine.plan import ModelFacts, plan_slots, SlotPlan, SlotRequest
    from mlxchat.engine.prefill.pacing import STALL
    from mlxchat.engine.remote.engine import RemoteEngine
    from mlxchat.engine.remote.server import api_and_root, describe_error, make_client, probe, ServerError
    from mlxchat.engine.remote.state import remote_plan
    from mlxchat.engine.requests import Messages
    from mlxchat.engine.startup import (
        EngineConfig, load_step, prepare_mlx, retire, start_local, StartedEngine, StartError,
    )
