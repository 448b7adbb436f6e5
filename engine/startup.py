"""The engine starts itself: load the model, evaluate the slot plan, check memory, read the tuning, start.

The caller hands plain values (EngineConfig) and gets a StartedEngine, or a StartError that says
which step refused; the app words those errors for its user.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mlxchat.engine.loading.models import LoadOptions
from mlxchat.engine.loading.progress import ModelLoadError, Progress
from mlxchat.engine.memory import check_memory, format_bytes
from mlxchat.engine.plan import ModelFacts, SlotPlan, SlotRequest

if TYPE_CHECKING:
    from mlxchat.engine.chat_engine import ChatEngine
    from mlxchat.engine.cpu.blas import BlasInfo

# Which step refused: the model (missing, unreadable), its family (layers the engine cannot hold),
# the slot plan (the caller's sizes), or memory (weights and KV beyond the machine).
StartStep = Literal["model", "family", "kv", "plan", "memory", "draft"]


@dataclass(frozen=True)
class EngineConfig:
    """What the local engine is started with; every value plain, every folder given."""

    model: str | None  # a folder, a Hub id, a .gguf file; None: the default model
    load: LoadOptions  # how it is loaded and held, and its draft model with it
    slots: SlotRequest
    kv_dir: Path  # the disk tier's saved KV
    park_budget_mb: int
    disk_kv_mb: int
    nice: int  # the engine threads' priority below the UI's
    prefill_stall: float
    draft_model: str | None = None  # a model that drafts for replies with speculative = "draft", as `model` is given


@dataclass(frozen=True)
class StartedEngine:
    """A running engine, its slot plan, the model's name, warnings to show, and the model's facts for
    re-evaluating slots (None for a server: its slots are its own)."""

    engine: ChatEngine
    plan: SlotPlan
    model_name: str
    warnings: tuple[str, ...]
    facts: ModelFacts | None
    # Whether the chat template has a thinking switch (a server's templates are its own: it is asked to).
    thinking_switch: bool = True
    takes_tools: bool = False  # whether replies may call tools (the template lists them, their calls can be read)
    sees: bool = False  # whether chats may send it images (a vision model loaded through mlx-vlm, or a server)
    draft_model: str | None = None  # the draft model's name, where one is loaded (speculative = "draft" drafts)
    why_no_images: str = ""  # why not, where the engine says more than "a text model" (a server that said so)


def load_step(exc: ModelLoadError) -> StartStep:
    """Where a load was refused: the model's family, the K/V type asked for its heads, or the model itself."""
    from mlxchat.engine.kv.kv_types import UnsupportedKV
    from mlxchat.engine.loading.families import UnsupportedFamily

    return ("family" if isinstance(exc.__cause__, UnsupportedFamily) else
            "kv" if isinstance(exc.__cause__, UnsupportedKV) else "model")


class StartError(Exception):
    """The engine could not start; `step` says where it refused."""

    def __init__(self, message: str, step: StartStep) -> None:
        super().__init__(message)
        self.step = step


def prepare_mlx(blas: str, exact: bool) -> tuple[BlasInfo, str]:
    """Before anything imports mlx.core: loads the BLAS `blas` names (the one loaded first is the one MLX binds to)
    and, with `exact`, keeps CUDA's float32 matmuls off TF32 (MLX reads the switch when it starts). Returns the BLAS
    in use and a note where the switch came too late; BlasError where `blas` cannot load."""
    from mlxchat.engine.cpu.blas import load_blas
    from mlxchat.engine.devices import use_exact_matmuls

    late = use_exact_matmuls(exact)
    return load_blas(blas), late


def start_local(
    config: EngineConfig,
    progress: Callable[[Progress], None],
    refuse: Callable[[int | None], list[str]] = lambda trained_ctx: [],
) -> StartedEngine:
    """Loads the model, evaluates the slot plan, checks memory and starts the engine (slow: a worker thread).

    `refuse(trained_ctx)`: the caller's own reasons to refuse its sizes once the model's trained context
    is known (worded for its user). Raises StartError.
    """
    # Imported here: they load mlx.core, which must come after the caller has loaded its BLAS.
    from mlxchat.engine.cpu.blas import blas_in_use
    from mlxchat.engine.devices import device_kind, device_name
    from mlxchat.engine.kv.disk import DiskTier
    from mlxchat.engine.loading.models import load_model
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.reply_parts import has_thinking_switch, takes_tools
    from mlxchat.engine.speculation.draft_load import load_draft, short_training
    from mlxchat.engine.status import EngineInfo

    try:
        loaded = load_model(config.model, config.load, progress)
    except ModelLoadError as exc:
        raise StartError(str(exc), load_step(exc)) from None
    try:
        draft, held = load_draft(config.draft_model, loaded, config.load, progress) if config.draft_model else \
            (None, None)
    except ModelLoadError as exc:  # (DraftRefused among them)
        raise StartError(str(exc), "draft") from None
    facts = loaded.facts_with(held)  # (the draft's K/V is divided among the same slots)
    plan = facts.evaluate(config.slots)
    refused = [*refuse(loaded.trained_ctx), *plan.errors]
    if refused:
        raise StartError("\n".join(refused), "plan")
    memory = check_memory(loaded.weights_bytes + (held.weights_bytes if held else 0), plan.kv_bytes)
    if memory.error and held:
        raise StartError(f"{memory.error} (the draft model's {format_bytes(held.weights_bytes)} of weights and "
                         f"{format_bytes(plan.draft_kv_bytes)} of K/V included: unset draft_model, or name a smaller "
                         "one)", "plan")
    if memory.error:
        raise StartError(memory.error, "plan")
    progress(Progress("Starting the engine", 0, 0))
    info = EngineInfo(
        model=loaded.source.display_name,
        device=f"{device_kind()} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        weights_bytes=loaded.weights_bytes,
        batching=loaded.weights.batching_note,
        images=loaded.images,
    )
    try:
        engine = Engine(
            loaded.ready, plan, info=info, split=loaded.tuning.split if loaded.tuning else None,
            park_budget_bytes=config.park_budget_mb * 2**20, nice=config.nice,
            disk=DiskTier(config.kv_dir, config.disk_kv_mb * 2**20, loaded.kv_key),
            prefill_stall=config.prefill_stall, draft=draft,
        )
    except MemoryError:
        raise StartError(f"there is not enough memory for the KV cache of {plan.summary}", "memory") from None
    # Everything alive now (modules, the model, the tokenizer) lives as long as the engine: moved out
    # of the garbage collector's reach, a full collection while chats stream stalls every thread
    # for about half as long (measured: up to 223 ms of CPU per collection before, 121 after).
    gc.collect()
    gc.freeze()
    short = held and short_training(held, plan)
    warnings = plan.warnings + tuple(filter(None, [memory.warning, loaded.vision_note, short]))
    return StartedEngine(engine, plan, loaded.source.display_name, warnings, facts,
                         thinking_switch=has_thinking_switch(loaded.tokenizer),
                         takes_tools=takes_tools(loaded.tokenizer), sees=loaded.sees,
                         draft_model=draft.name if draft else None)


def retire(engine: ChatEngine) -> None:
    """Stops an engine that another has replaced (its replies end as cancelled) and gives its memory back: its model,
    its KV and the chats' parked KV (the disk tier, keyed by model, stays)."""
    engine.shutdown()
    gc.unfreeze()  # start_local froze what lived then, the retired model's objects among them
    gc.collect()
    gc.freeze()
    if "mlx.core" in sys.modules:  # (a server's engine imported none)
        import mlx.core as mx

        mx.clear_cache()
