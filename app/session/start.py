"""Start-up of the local engine, as the app asks for it: its settings as the engine's config, the engine's
refusals (and the settings' own problems) as a StartFailure that says what to change."""

from __future__ import annotations

from collections.abc import Callable

from mlxchat.app import paths
from mlxchat.app.chats.private import private_folder
from mlxchat.app.config.settings import Settings, settings_problems
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE
from mlxchat.engine import EngineConfig, LoadOptions, Progress, StartedEngine, StartError, start_local


class StartFailure(Exception):
    """A start-up problem with the change that fixes it, and the exit status it ends the app with:
    EXIT_USAGE for settings or a model the engine refuses (as the command line does), else EXIT_FAILURE."""

    def __init__(self, problem: str, remedy: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(problem)
        self.problem = problem
        self.remedy = remedy
        self.status = status


DOCTOR_REMEDY = "Run `mlxchat doctor` to check the set-up."
PLAN_REMEDY = (
    "Change --parallel / --ctx-size / --ctx-per-slot on the command line, "
    "or parallel / ctx_size / ctx_per_slot in the config file."
)
# What to change, and the exit status, for each step the engine can refuse at.
REMEDIES = {
    "model": ("Set --model or `model` in the config file to a model that exists.", EXIT_FAILURE),
    "family": ("Set --model or `model` in the config file to a model whose layers `mlxchat models` lists.", EXIT_USAGE),
    "kv": ('Set `kv_dtype` in the config file (or MLXCHAT_KV_DTYPE) to "float16" or "bfloat16".', EXIT_USAGE),
    "plan": (PLAN_REMEDY, EXIT_USAGE),
    "memory": (PLAN_REMEDY, EXIT_FAILURE),
    "draft": ("Set `draft_model` in the config file (or MLXCHAT_DRAFT_MODEL) to a model with the model's tokenizer, "
              "or unset it.", EXIT_USAGE),
}


def load_options(settings: Settings) -> LoadOptions:
    """How the settings load a model (and its draft model), wherever the app loads one."""
    return LoadOptions(
        weights_dtype=settings.weights_dtype,
        kv_dtype=settings.kv_dtype,
        int8_activations=settings.int8_activations,
        cache_dir=paths.models_cache_dir(),
        tuning_file=paths.tuning_file(),
    )


def engine_config(settings: Settings) -> EngineConfig:
    """The settings the local engine starts with, as plain values."""
    return EngineConfig(
        model=settings.model,
        load=load_options(settings),
        slots=settings.slot_request(),
        kv_dir=paths.kv_cache_dir(),
        park_budget_mb=settings.park_budget_mb,
        disk_kv_mb=settings.disk_kv_mb,
        nice=settings.engine_nice,
        prefill_stall=settings.prefill_stall,
        draft_model=settings.draft_model,
    )


def start_engine(settings: Settings, progress: Callable[[Progress], None]) -> StartedEngine:
    """Starts the local engine (slow: call from a worker thread). Raises StartFailure with what to change."""
    config = engine_config(settings)
    if config.disk_kv_mb > 0:
        private_folder(config.kv_dir)  # the engine saves KV under it, owner-only
    try:
        return start_local(config, progress, lambda trained: settings_problems(settings, trained))
    except StartError as exc:
        remedy, status = REMEDIES[exc.step]
        raise StartFailure(str(exc), remedy, status) from None
