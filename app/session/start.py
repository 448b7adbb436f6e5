"""Start-up: loads the model, plans the slots, checks memory and starts the engine (on a worker thread)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxchat.app.config.settings import Settings, refusals
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE
from mlxchat.app import paths
from mlxchat.app.paths import models_cache_dir, tuning_file
from mlxchat.engine.loading.models import ModelLoadError, Progress, load_model
from mlxchat.engine.chat_engine import ChatEngine
from mlxchat.engine.memory import check_memory
from mlxchat.engine.plan import SlotPlan, SlotRequest, plan_slots

if TYPE_CHECKING:
    from mlxchat.engine.kv.kinds import KVFootprint


@dataclass(frozen=True)
class ModelFacts:
    """What the slot evaluation needs to know about the loaded model, kept so the slider can re-evaluate."""

    trained_ctx: int | None
    kv_bytes_per_token: int
    kv_footprint: KVFootprint | None = None  # each layer kind sized on its own

    def evaluate(self, request: SlotRequest) -> SlotPlan:
        """The engine's evaluation of a slot request for this model."""
        return plan_slots(request, self.trained_ctx, self.kv_bytes_per_token, self.kv_footprint)


@dataclass(frozen=True)
class Started:
    """What start-up hands the session: the engine, its slot plan, the model's name, warnings to show,
    and the model's facts for re-evaluating slots (None for a server: its slots are its own)."""

    engine: ChatEngine
    plan: SlotPlan
    model_name: str
    warnings: tuple[str, ...]
    facts: ModelFacts | None


class StartFailure(Exception):
    """A start-up problem with the change that fixes it, and the exit status it ends the app with:
    EXIT_USAGE for settings or a model the engine refuses (as the command line does), else EXIT_FAILURE."""

    def __init__(self, problem: str, remedy: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(problem)
        self.problem = problem
        self.remedy = remedy
        self.status = status


PLAN_REMEDY = (
    "Change --parallel / --ctx-size / --ctx-per-slot on the command line, "
    "or parallel / ctx_size / ctx_per_slot in the config file."
)


def start_engine(settings: Settings, progress: Callable[[Progress], None]) -> Started:
    """Loads the model, evaluates the slot plan and starts the engine (slow: call from a worker thread).

    Raises StartFailure with what to change when the model cannot be loaded or the plan is refused.
    """
    # The scheduler imports mlx.core, which must come after the CLI has loaded its BLAS.
    from mlxchat.engine.cpu.blas import blas_in_use
    from mlxchat.engine.cpu.tuning import load_tuning
    from mlxchat.engine.devices import batching_note, device_kind, device_name
    from mlxchat.engine.kv.disk import DiskTier
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.status import EngineInfo

    try:
        loaded = load_model(
            settings.model, settings.weights_dtype, progress=progress, cache_dir=models_cache_dir()
        )
    except ModelLoadError as exc:
        from mlxchat.engine.loading.families import UnsupportedFamily

        if isinstance(exc.__cause__, UnsupportedFamily):
            raise StartFailure(
                str(exc), "Set --model or `model` in the config file to a model whose layers `mlxchat models` lists.",
                EXIT_USAGE,
            ) from None
        raise StartFailure(str(exc), "Set --model or `model` in the config file to a model that exists.") from None
    facts = ModelFacts(loaded.trained_ctx, loaded.kv_bytes_per_token, loaded.kv_footprint)
    plan = facts.evaluate(settings.slot_request())
    refused = [*refusals(settings, loaded.trained_ctx), *plan.errors]
    if refused:
        raise StartFailure("\n".join(refused), PLAN_REMEDY, EXIT_USAGE)
    memory = check_memory(loaded.weights_bytes, plan.kv_bytes)
    if memory.error:
        raise StartFailure(memory.error, PLAN_REMEDY, EXIT_USAGE)
    progress(Progress("Starting the engine", 0, 0))
    info = EngineInfo(
        model=loaded.source.display_name,
        device=f"{device_kind()} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        weights_bytes=loaded.weights_bytes,
        batching=batching_note(device_kind(), loaded.dtype, loaded.kernel_matmuls),
    )
    try:
        tuned = load_tuning(loaded.model, tuning_file())
        engine = Engine(
            loaded.model, loaded.tokenizer, plan, info=info, split=tuned.split if tuned else None,
            park_budget_bytes=settings.park_budget_mb * 2**20, nice=settings.engine_nice,
            padded_prefill=loaded.padded_prefill,
            disk=DiskTier(paths.kv_cache_dir(), settings.disk_kv_mb * 2**20, loaded.kv_key),
            prefill_stall=settings.prefill_stall,
        )
    except MemoryError:
        raise StartFailure(
            f"there is not enough memory for the KV cache of {plan.summary}", PLAN_REMEDY
        ) from None
    # Everything alive now (modules, the model, the tokenizer) lives as long as the app: moved out
    # of the garbage collector's reach, a full collection while chats stream stalls every thread
    # for about half as long (measured: up to 223 ms of CPU per collection before, 121 after).
    gc.collect()
    gc.freeze()
    warnings = plan.warnings + ((memory.warning,) if memory.warning else ())
    return Started(engine, plan, loaded.source.display_name, warnings, facts)
