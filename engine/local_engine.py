"""The local engine: a thread that owns the model and steps the slot scheduler, fed by typed commands.

Every MLX call happens on the engine's own thread; the public methods only queue commands, so
they are safe to call from any thread (a UI's, a test's). The scheduling itself is
engine.scheduler.SlotScheduler, which has no thread and can be driven step by step.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mlxchat.engine.cpu.blas import blas_workers
from mlxchat.engine.cpu.priority import run_below_ui
from mlxchat.engine.devices import release_thread_streams
from mlxchat.engine.events import EngineSnapshot
from mlxchat.engine.prefill.images import image_prompt, image_tokens
from mlxchat.engine.requests import Messages, Submit, TakesRequests, Tools, image_paths, render, template_kwargs
from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.scheduler import SlotScheduler
from mlxchat.engine.status import EngineInfo

if TYPE_CHECKING:
    from mlxchat.engine.loading.batch_check import SlotReady

# An idle engine woken by a command waits this long for the next (and reads on while they keep coming, up to the
# most): the chat app's sends of several chats at once reach it a few ms apart. A lone request's first token is
# this much later; the bench --ui's eight chats measured 0.80-0.81 of headless from first send to last reply
# without it (Intel Xeon, 2 cores): the first prompt was read alone, the other seven beside its stream.
GATHER_S = 0.005
GATHER_MAX_S = 0.05


@dataclass(frozen=True)
class Cancel:
    slot_id: int


@dataclass(frozen=True)
class Clear:
    slot_id: int
    park: bool


@dataclass(frozen=True)
class Bind:
    slot_id: int
    label: str | None


@dataclass(frozen=True)
class Call:
    fn: Callable[[], Any]
    future: Future


@dataclass(frozen=True)
class Stop:
    pass


Command = Submit | Cancel | Clear | Bind | Call | Stop


class Engine(TakesRequests):
    """N slots over one model; `submit` a chat to a slot and read its events from the handle."""

    def __init__(self, ready: SlotReady, plan: SlotPlan, *, nice: int = 0, **options: Any) -> None:
        """`ready`: the model checked for the slots (LoadedModel.ready). `options` are SlotScheduler's (info,
        prefill_chunk, split, park_budget_bytes, disk, prefill_stall); it is set up on the calling thread.
        `nice`: on Linux, the nice value the engine's threads run at (engine.cpu.priority; 0: the caller's)."""
        self.core = SlotScheduler(ready, plan, **options)
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._request_ids = itertools.count(1)
        self._nice = nice
        self._thread = threading.Thread(target=self._run, name="mlxchat-engine", daemon=True)
        self._thread.start()

    # ---- public API (any thread) ----

    def cancel(self, slot_id: int) -> None:
        """Stops the slot's reply at the next step; what was written is kept and marked cancelled."""
        self._commands.put(Cancel(slot_id))

    def clear(self, slot_id: int, park: bool = True) -> None:
        """Empties the slot (cancelling its reply first); with `park` its cached conversation is kept in the
        parked store, so a prompt that continues it later gets it back instead of a prefill."""
        self._commands.put(Clear(slot_id, park))

    def bind(self, slot_id: int, label: str | None) -> None:
        """Names what the slot serves (a chat's title), for the snapshot."""
        self._commands.put(Bind(slot_id, label))

    def repartition(self, plan: SlotPlan) -> Future[dict[int, bool]]:
        """Rebuilds the slots for `plan`; resolves to {old slot id: whether its cached KV survived}."""
        return self.call(lambda: self.core.repartition(plan))

    def call(self, fn: Callable[[], Any]) -> Future[Any]:
        """Runs `fn` on the engine thread between steps (for work that must touch MLX)."""
        future: Future[Any] = Future()
        self._commands.put(Call(fn, future))
        return future

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the thread after the current step; active requests end as cancelled."""
        self._commands.put(Stop())
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def plan(self) -> SlotPlan:
        return self.core.plan

    @property
    def info(self) -> EngineInfo:
        return self.core.info

    def count_tokens(self, messages: Messages, tools: Tools | None = None) -> int | None:
        """How many tokens `messages` (and `tools`) take as the chat template writes them, a vision model's images
        as its processor expands them (from any thread)."""
        vision = getattr(self.core.model, "vision_parts", None)
        if vision is not None and image_paths(messages):
            return len(image_prompt(vision, self.core.tokenizer, messages, template_kwargs(tools=tools)).ids)
        return len(render(self.core.tokenizer, messages, tools=tools))

    def image_tokens(self, path: str) -> int | None:
        """How many tokens the image at `path` is to the model, counted by its own processor (None: a text model)."""
        vision = getattr(self.core.model, "vision_parts", None)
        return None if vision is None else image_tokens(vision, self.core.tokenizer, Path(path))

    def snapshot(self) -> EngineSnapshot:
        """Every slot's state and the engine-wide figures, as of the last step."""
        return self.core.snapshot()

    def _take(self, submit: Submit) -> None:
        self._commands.put(submit)

    # ---- the engine thread ----

    def _run(self) -> None:
        run_below_ui(self._nice, blas_workers())
        core = self.core
        try:
            while True:
                if not core.busy:
                    core.forward.working(False)
                if not self._drain(block=not core.busy):
                    break
                if core.busy:
                    core.forward.working(True)
                    core.step()
        finally:
            core.close()
            core.forward.working(False)
            release_thread_streams()

    def _drain(self, block: bool) -> bool:
        """Handles queued commands; False once shutdown was asked for. Woken from idle (`block`), it reads what
        comes within GATHER_S of the last command too, up to GATHER_MAX_S: requests sent together (several chats
        at once, a fan-out) start in one prefill pass, not the first alone and the rest beside its stream."""
        deadline = time.monotonic() + GATHER_MAX_S
        gathering = block
        while True:
            try:
                if block:
                    command = self._commands.get()
                elif gathering and (left := deadline - time.monotonic()) > 0:
                    command = self._commands.get(timeout=min(GATHER_S, left))
                else:
                    command = self._commands.get_nowait()
            except queue.Empty:
                return True
            if block:
                deadline, block = time.monotonic() + GATHER_MAX_S, False
            if isinstance(command, Stop):
                return False
            try:
                self._handle(command)
            except Exception as exc:  # (admit answers its own failures) the thread goes on; replies end with it
                self.core.fail_all(exc)

    def _handle(self, command: Command) -> None:
        core = self.core
        match command:
            case Submit():
                core.admit(command)
            case Cancel(slot_id):
                core.cancel(slot_id)
            case Clear(slot_id, park):
                core.clear(slot_id, park)
            case Bind(slot_id, label):
                core.bind(slot_id, label)
            case Call(fn, future):
                _resolve(future, fn)


def _resolve(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except Exception as exc:
        future.set_exception(exc)
