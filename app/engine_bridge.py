"""Turns what happens on other threads (model loading, engine events) into Textual messages.

Engine callbacks run on the engine thread and the loader on a worker thread: they only ever
post these messages (post_message is thread-safe), or put reply text in a ReplyFeed; the widgets
change in the handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message
from textual.message_pump import MessagePump

from app.config import Settings
from app.reply_frames import ReplyFeed
from engine.events import Done, Event, TextDelta
from engine.models import ModelLoadError, Progress, load_model
from engine.memory import check_memory
from engine.slot_plan import SlotPlan, evaluate_slots

if TYPE_CHECKING:
    from engine.scheduler import Engine


@dataclass(frozen=True)
class ModelFacts:
    """What the slot evaluation needs to know about the loaded model, kept so the slider can re-evaluate."""

    trained_ctx: int | None
    kv_bytes_per_token: int

    def evaluate(self, request: Mapping[str, int | None]) -> SlotPlan:
        """The engine's evaluation of a slot request (as Settings.slot_request() gives it) for this model."""
        return evaluate_slots(**request, trained_ctx=self.trained_ctx, kv_bytes_per_token=self.kv_bytes_per_token)


class LoadProgress(Message):
    """One step of loading the model (or converting a GGUF)."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress


class EngineReady(Message):
    """The model is loaded and the engine runs with this plan; `warnings` are the plan's and memory's."""

    def __init__(
        self, engine: Engine, plan: SlotPlan, model_name: str, warnings: tuple[str, ...], facts: ModelFacts
    ) -> None:
        super().__init__()
        self.engine = engine
        self.plan = plan
        self.facts = facts
        self.model_name = model_name
        self.warnings = warnings


class StartFailed(Message):
    """Start-up failed: what went wrong and what the user should change."""

    def __init__(self, problem: str, remedy: str) -> None:
        super().__init__()
        self.problem = problem
        self.remedy = remedy


class ReplyDone(Message):
    """The end of the reply a chat was waiting for (or its refusal)."""

    def __init__(self, chat_id: str, done: Done) -> None:
        super().__init__()
        self.chat_id = chat_id
        self.done = done


class StartFailure(Exception):
    """A start-up problem with the change that fixes it."""

    def __init__(self, problem: str, remedy: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.remedy = remedy


PLAN_REMEDY = (
    "Change --parallel / --ctx-size / --ctx-per-slot on the command line, "
    "or parallel / ctx_size / ctx_per_slot in the config file."
)


def start_engine(
    settings: Settings, progress: Callable[[Progress], None]
) -> tuple[Engine, SlotPlan, str, tuple[str, ...], ModelFacts]:
    """Loads the model, evaluates the slot plan and starts the engine (slow: call from a worker thread).

    Raises StartFailure with what to change when the model cannot be loaded or the plan is refused.
    """
    # The scheduler imports mlx.core, which must come after the CLI has loaded its BLAS.
    from engine.blas import blas_in_use
    from engine.devices import device_kind, device_name
    from engine.scheduler import Engine, EngineInfo

    try:
        loaded = load_model(settings.model, settings.weights_dtype, progress=progress)
    except ModelLoadError as exc:
        raise StartFailure(str(exc), "Set --model or `model` in the config file to a model that exists.") from None
    facts = ModelFacts(loaded.trained_ctx, loaded.kv_bytes_per_token)
    plan = facts.evaluate(settings.slot_request())
    if plan.errors:
        raise StartFailure("\n".join(plan.errors), PLAN_REMEDY)
    memory = check_memory(loaded.weights_bytes, plan.kv_bytes)
    if memory.error:
        raise StartFailure(memory.error, PLAN_REMEDY)
    progress(Progress("Starting the engine", 0, 0))
    info = EngineInfo(
        model=loaded.source.display_name,
        device=f"{device_kind()} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        weights_bytes=loaded.weights_bytes,
    )
    try:
        engine = Engine(loaded.model, loaded.tokenizer, plan, info=info)
    except MemoryError:
        raise StartFailure(
            f"there is not enough memory for the KV cache of {plan.summary}", PLAN_REMEDY
        ) from None
    warnings = plan.warnings + ((memory.warning,) if memory.warning else ())
    return engine, plan, loaded.source.display_name, warnings, facts


def reply_callback(target: MessagePump, chat_id: str, feed: ReplyFeed) -> Callable[[Event], None]:
    """An engine `on_event` callback (run on the engine thread) for one reply of a chat: its text goes
    into `feed`, drawn at the next frame; its end is posted to `target`."""

    def on_event(event: Event) -> None:
        if isinstance(event, TextDelta):
            feed.put(event.text)
        else:
            target.post_message(ReplyDone(chat_id, event))

    return on_event
