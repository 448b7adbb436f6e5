"""The engine's public API: what the app (and any other caller) may use; tests/test_layout.py holds the app to it.

Every name is imported on first use, not here: on Linux the CLI must load its BLAS (load_blas)
before anything imports mlx.core, and `import mlxchat.engine` must stay that cheap. Names
whose module imports mlx.core (Engine, EngineInfo, the bench's runners) load MLX when they are first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it ("module:name" where the module calls it otherwise)
_NAMES: dict[str, str] = {
    # bench.kv_scenario
    "format_kv_table": "mlxchat.engine.bench.kv_scenario",
    "KV_SCENARIO": "mlxchat.engine.bench.kv_scenario",
    "run_kv_bench": "mlxchat.engine.bench.kv_scenario",
    # bench.long_scenario
    "format_long_table": "mlxchat.engine.bench.long_scenario",
    "LONG_PROMPT_TOKENS": "mlxchat.engine.bench.long_scenario",
    "LONG_SCENARIO": "mlxchat.engine.bench.long_scenario",
    "LONG_STREAMS": "mlxchat.engine.bench.long_scenario",
    "run_long_bench": "mlxchat.engine.bench.long_scenario",
    # bench.plot
    "check_plot_path": "mlxchat.engine.bench.plot",
    "plot_report": "mlxchat.engine.bench.plot",
    "PlotError": "mlxchat.engine.bench.plot",
    # bench.registry
    "BenchError": "mlxchat.engine.bench.registry",
    "BenchRefused": "mlxchat.engine.bench.registry",
    # bench.report
    "format_table": "mlxchat.engine.bench.report",
    "make_report": "mlxchat.engine.bench.report",
    "write_json": "mlxchat.engine.bench.report",
    # bench.resume_scenario
    "format_resume_table": "mlxchat.engine.bench.resume_scenario",
    "RESUME_SCENARIO": "mlxchat.engine.bench.resume_scenario",
    "run_resume_bench": "mlxchat.engine.bench.resume_scenario",
    # bench.speculative_scenario
    "format_speculative_table": "mlxchat.engine.bench.speculative_scenario",
    "run_speculative_bench": "mlxchat.engine.bench.speculative_scenario",
    "SPECULATIVE_SCENARIO": "mlxchat.engine.bench.speculative_scenario",
    # bench.return_scenario
    "format_return_table": "mlxchat.engine.bench.return_scenario",
    "RETURN_SCENARIO": "mlxchat.engine.bench.return_scenario",
    "RETURN_SLOTS": "mlxchat.engine.bench.return_scenario",
    "RETURN_TOKENS": "mlxchat.engine.bench.return_scenario",
    "run_return_bench": "mlxchat.engine.bench.return_scenario",
    # bench.runners
    "DEFAULT_ENGINES": "mlxchat.engine.bench.runners",
    "SCENARIO_ENGINES": "mlxchat.engine.bench.runners",
    "DEFAULT_MAX_TOKENS": "mlxchat.engine.bench.runners",
    "DEFAULT_REPEATS": "mlxchat.engine.bench.runners",
    "DEFAULT_SLOTS": "mlxchat.engine.bench.runners",
    "MAX_SLOTS": "mlxchat.engine.bench.runners",
    "run_bench": "mlxchat.engine.bench.runners",
    "RUNNERS": "mlxchat.engine.bench.runners",
    # bench.step_profile
    "format_profile": "mlxchat.engine.bench.step_profile",
    "profile_decode": "mlxchat.engine.bench.step_profile",
    # bench.shapes
    "build_shape": "mlxchat.engine.bench.shapes",
    "SHAPES": "mlxchat.engine.bench.shapes",
    # bench.workloads
    "SCENARIOS": "mlxchat.engine.bench.workloads",
    # chat_engine
    "ChatEngine": "mlxchat.engine.chat_engine",
    # cpu.blas
    "blas_in_use": "mlxchat.engine.cpu.blas",
    "BlasError": "mlxchat.engine.cpu.blas",
    "BlasInfo": "mlxchat.engine.cpu.blas",
    "load_blas": "mlxchat.engine.cpu.blas",
    "remedy": "mlxchat.engine.cpu.blas",
    # cpu.kernels
    "kernel_status": "mlxchat.engine.cpu.kernels:status",
    # devices
    "cpu_summary": "mlxchat.engine.devices",
    "device_kind": "mlxchat.engine.devices",
    "device_name": "mlxchat.engine.devices",
    "release_thread_streams": "mlxchat.engine.devices",
    "use_exact_matmuls": "mlxchat.engine.devices",
    # events
    "Done": "mlxchat.engine.events",
    "EngineSnapshot": "mlxchat.engine.events",
    "Event": "mlxchat.engine.events",
    "FinishReason": "mlxchat.engine.events",
    "ParkedSnapshot": "mlxchat.engine.events",
    "Part": "mlxchat.engine.events",
    "RequestStats": "mlxchat.engine.events",
    "SamplingParams": "mlxchat.engine.events",
    "SlotSnapshot": "mlxchat.engine.events",
    "SlotState": "mlxchat.engine.events",
    "TextDelta": "mlxchat.engine.events",
    "ToolCall": "mlxchat.engine.events",
    # loading.catalog
    "local_models": "mlxchat.engine.loading.catalog",
    "ModelEntry": "mlxchat.engine.loading.catalog",
    # loading.families
    "describe_families": "mlxchat.engine.loading.families:describe",
    "layer_kinds": "mlxchat.engine.loading.families",
    "model_type": "mlxchat.engine.loading.families",
    "UnsupportedFamily": "mlxchat.engine.loading.families",
    # loading.models
    "load_model": "mlxchat.engine.loading.models",
    "LoadedModel": "mlxchat.engine.loading.models",
    "ModelSource": "mlxchat.engine.loading.models",
    "resolve_model": "mlxchat.engine.loading.models",
    # loading.progress
    "ModelLoadError": "mlxchat.engine.loading.progress",
    "Progress": "mlxchat.engine.loading.progress",
    # local_engine
    "Engine": "mlxchat.engine.local_engine",
    # memory
    "check_memory": "mlxchat.engine.memory",
    "DEFAULT_DISK_KV_MB": "mlxchat.engine.memory",
    "DEFAULT_PARK_BUDGET_MB": "mlxchat.engine.memory",
    "format_bytes": "mlxchat.engine.memory",
    "memory_info": "mlxchat.engine.memory",
    "MemoryCheck": "mlxchat.engine.memory",
    "MemoryInfo": "mlxchat.engine.memory",
    # plan
    "ModelFacts": "mlxchat.engine.plan",
    "plan_slots": "mlxchat.engine.plan",
    "SlotPlan": "mlxchat.engine.plan",
    "SlotRequest": "mlxchat.engine.plan",
    # prefill.pacing
    "STALL": "mlxchat.engine.prefill.pacing",
    # private_files
    "FILE_MODE": "mlxchat.engine.private_files",
    "private_folder": "mlxchat.engine.private_files",
    "tighten": "mlxchat.engine.private_files",
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
    # speculation.notes
    "model_speculation": "mlxchat.engine.speculation.notes",
    # startup
    "EngineConfig": "mlxchat.engine.startup",
    "load_step": "mlxchat.engine.startup",
    "retire": "mlxchat.engine.startup",
    "start_local": "mlxchat.engine.startup",
    "StartedEngine": "mlxchat.engine.startup",
    "StartError": "mlxchat.engine.startup",
    # status
    "EngineInfo": "mlxchat.engine.status",
    # tuning
    "load_tuning": "mlxchat.engine.tuning",
    "tunable": "mlxchat.engine.tuning",
    "tune": "mlxchat.engine.tuning",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = _NAMES[name].partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))


if TYPE_CHECKING:  # what type checkers and editors see
    from mlxchat.engine.bench.kv_scenario import format_kv_table, KV_SCENARIO, run_kv_bench
    from mlxchat.engine.bench.long_scenario import (
        format_long_table,
        LONG_PROMPT_TOKENS,
        LONG_SCENARIO,
        LONG_STREAMS,
        run_long_bench,
    )
    from mlxchat.engine.bench.plot import check_plot_path, plot_report, PlotError
    from mlxchat.engine.bench.registry import BenchError, BenchRefused
    from mlxchat.engine.bench.report import format_table, make_report, write_json
    from mlxchat.engine.bench.resume_scenario import format_resume_table, RESUME_SCENARIO, run_resume_bench
    from mlxchat.engine.bench.return_scenario import (
        format_return_table,
        RETURN_SCENARIO,
        RETURN_SLOTS,
        RETURN_TOKENS,
        run_return_bench,
    )
    from mlxchat.engine.bench.runners import (
        DEFAULT_ENGINES,
        SCENARIO_ENGINES,
        DEFAULT_MAX_TOKENS,
        DEFAULT_REPEATS,
        DEFAULT_SLOTS,
        MAX_SLOTS,
        run_bench,
        RUNNERS,
    )
    from mlxchat.engine.bench.shapes import build_shape, SHAPES
    from mlxchat.engine.bench.step_profile import format_profile, profile_decode
    from mlxchat.engine.bench.workloads import SCENARIOS
    from mlxchat.engine.chat_engine import ChatEngine
    from mlxchat.engine.cpu.blas import blas_in_use, BlasError, BlasInfo, load_blas, remedy
    from mlxchat.engine.cpu.kernels import status as kernel_status
    from mlxchat.engine.devices import (
        cpu_summary,
        device_kind,
        device_name,
        release_thread_streams,
        use_exact_matmuls,
    )
    from mlxchat.engine.events import (
        Done,
        EngineSnapshot,
        Event,
        FinishReason,
        ParkedSnapshot,
        Part,
        RequestStats,
        SamplingParams,
        SlotSnapshot,
        SlotState,
        TextDelta,
        ToolCall,
    )
    from mlxchat.engine.loading.catalog import local_models, ModelEntry
    from mlxchat.engine.loading.families import (
        describe as describe_families,
        layer_kinds,
        model_type,
        UnsupportedFamily,
    )
    from mlxchat.engine.loading.models import load_model, LoadedModel, ModelSource, resolve_model
    from mlxchat.engine.loading.progress import ModelLoadError, Progress
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.memory import (
        check_memory,
        DEFAULT_DISK_KV_MB,
        DEFAULT_PARK_BUDGET_MB,
        format_bytes,
        memory_info,
        MemoryCheck,
        MemoryInfo,
    )
    from mlxchat.engine.plan import ModelFacts, plan_slots, SlotPlan, SlotRequest
    from mlxchat.engine.prefill.pacing import STALL
    from mlxchat.engine.private_files import FILE_MODE, private_folder, tighten
    from mlxchat.engine.remote.engine import RemoteEngine
    from mlxchat.engine.remote.server import api_and_root, describe_error, make_client, probe, ServerError
    from mlxchat.engine.remote.state import remote_plan
    from mlxchat.engine.requests import Messages
    from mlxchat.engine.startup import (
        EngineConfig, load_step, retire, start_local, StartedEngine, StartError,
    )
    from mlxchat.engine.status import EngineInfo
    from mlxchat.engine.tuning import load_tuning, tunable, tune
