"""What the session tells the UI: Textual messages, posted from any thread (post_message is thread-safe).

Start-up messages and PlanChanged go to the app; a chat's own messages (its seat, its reply's end)
go to the widget that opened the chat and bubble up from there.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from mlxchat.engine import Done, Progress, SlotPlan


@dataclass
class LoadProgress(Message):
    """One step of loading the model (or converting a GGUF)."""

    progress: Progress


@dataclass
class EngineReady(Message):
    """The model is loaded and the engine runs; `warnings` are the plan's and memory's."""

    warnings: tuple[str, ...]


@dataclass
class StartFailed(Message):
    """Start-up failed: what went wrong, what the user should change, and the exit status it ends with."""

    problem: str
    remedy: str
    status: int


@dataclass
class PlanChanged(Message, bubble=False):
    """The engine now runs `plan` (after a re-partition asked of the session); the chats are re-seated."""

    plan: SlotPlan


@dataclass
class PlanRefused(Message, bubble=False):
    """The engine could not re-partition (it keeps its slots as they were)."""

    error: str


@dataclass
class ChatSeated(Message):
    """The chat `key` sits on another slot now (or on none): `before` is where it sat, `kv_kept` whether
    the slot still holds its conversation (so its next turn prefills only the new tokens).

    `lent`: the slot changed hands because a chat needed one to send (lent to it, or taken from this
    idle chat for another), not because the slots were re-partitioned or a chat closed.
    """

    key: str
    slot: int | None
    before: int | None
    kv_kept: bool
    lent: bool = False


@dataclass
class Queued(Message):
    """Request `request` of chat `key` waits for a slot (every slot is generating): `place` in line, from 1."""

    key: str
    request: int
    place: int


@dataclass
class Withdrawn(Message):
    """Request `request` of chat `key` was taken out of the queue before it started (the user stopped it)."""

    key: str
    request: int


@dataclass
class ReplyDone(Message):
    """The end of request `request` of chat `key` (or its refusal), as the engine reported it."""

    key: str
    request: int
    done: Done
