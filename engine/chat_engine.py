"""What a caller needs of an engine, local (engine.local_engine) or remote (engine.remote): no MLX here."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from mlxchat.engine.events import EngineSnapshot, Event, SamplingParams
from mlxchat.engine.handle import RequestHandle
from mlxchat.engine.requests import Messages, Tools
from mlxchat.engine.plan import SlotPlan



class ChatEngine(Protocol):
    """Slots that write replies: every method may be called from any thread."""

    def submit(
        self,
        slot_id: int,
        messages: Messages | None = None,
        *,
        tokens: list[int] | None = None,
        sampling: SamplingParams = ...,
        on_event: Callable[[Event], None] | None = None,
        tools: Tools | None = None,
        unlisted_tools: Tools | None = None,
    ) -> RequestHandle:
        """Starts a reply in `slot_id`; its events come on the handle and to `on_event`, ending with Done."""
        ...

    def cancel(self, slot_id: int) -> None:
        """Stops the slot's reply; what was written is kept and marked cancelled."""
        ...

    def clear(self, slot_id: int) -> None:
        """Empties the slot (cancelling its reply first)."""
        ...

    def bind(self, slot_id: int, label: str | None) -> None:
        """Names what the slot serves (a chat's title), for the snapshot."""
        ...

    def repartition(self, plan: SlotPlan) -> Future[dict[int, bool]]:
        """Rebuilds the slots for `plan`; resolves to {old slot id: whether its cached KV survived}."""
        ...

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the engine; replies still running end as cancelled."""
        ...

    @property
    def alive(self) -> bool: ...

    plan: SlotPlan
    """The slots as they are now (what the slots screen and the bench read)."""

    def snapshot(self) -> EngineSnapshot:
        """Every slot's state and the engine-wide figures."""
        ...

    def count_tokens(self, messages: Messages, tools: Tools | None = None) -> int | None:
        """How many tokens `messages` and `tools` take of a slot, as the chat template writes them (None: unknown);
        ValueError, saying what to change, where the engine cannot read them (an image marker in a vision chat's
        text that cannot be read as text)."""
        ...

    def image_tokens(self, path: str) -> int | None:
        """How many tokens the image at `path` is to the model, counted by its own processor; None where the model
        takes no images (a text model, a server)."""
        ...
