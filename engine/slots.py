"""A slot's conversation state and the request it is serving."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from mlxchat.engine.events import Event, SamplingParams, SlotState
from mlxchat.engine.handle import RequestHandle
from mlxchat.engine.rate import stream_rate
from mlxchat.engine.sampling import SlotSampler

if TYPE_CHECKING:
    from mlxchat.engine.kv.slot_store import SlotKVStore
    from mlxchat.engine.reply_parts import ReplySplit


@dataclass
class Request:
    """One reply being produced in a slot."""

    id: int
    handle: RequestHandle
    prompt: list[int]
    sampling: SamplingParams
    sampler: SlotSampler
    detokenizer: Any
    on_event: Callable[[Event], None] | None
    split: ReplySplit  # which part of the reply its text is, and its reasoning's count
    tools: Any = None  # the tools it may call (their schemas, for the tool parser)
    cached: int = 0
    refilled: int = 0  # prompt tokens the slot held but had to prefill again (a window or state cannot roll back)
    pending: list[int] = field(default_factory=list)
    restored_from: str | None = None  # where its cached prefix came from when not its slot: "parked", "slot 2"
    lost: str | None = None  # why a history it continues had to be prefilled again (its parked KV was evicted)
    # Its images' inputs (engine.prefill.images.ImagePrompt: a vision model's), read when a chunk reaches them.
    images: Any = None
    next_input: int | None = None
    generated: int = 0
    unreported: int = 0  # generated tokens whose text has not been sent yet
    text: list[str] = field(default_factory=list)  # its answer (and tool calls), not its reasoning
    # Tokens the engine feeds in place of the model's next ones (the end of reasoning, its budget spent).
    forced: list[int] = field(default_factory=list)
    cancelled: bool = False
    drafted: int = 0  # tokens drafted for it and checked (engine.speculation)
    accepted: int = 0  # of those, the ones the model chose too
    t_submit: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float | None = None

    def continues(self) -> bool:
        """Whether the reply may go on after its next token (known limits only; EOS is seen later)."""
        return not self.cancelled and self.generated + 1 < self.sampling.max_tokens

    @property
    def prompt_processed(self) -> int:
        return len(self.prompt) - len(self.pending)

    def decode_tok_s(self) -> float:
        return stream_rate(self.generated, self.t_first, self.t_last)


@dataclass
class Slot:
    """One of the N slots: the tokens whose K/V it stores, and the request it serves if any."""

    id: int
    history: list[int] = field(default_factory=list)
    request: Request | None = None
    label: str | None = None
    last_tok_s: float = 0.0
    last_refilled: int = 0

    def rollback(self, store: SlotKVStore, keep: int) -> None:
        """Keeps the first `keep` cached tokens (the store's K/V beyond them is overwritten later)."""
        del self.history[keep:]
        store.rollback(self.id, len(self.history))

    @property
    def state(self) -> SlotState:
        if self.request is None:
            return "idle"
        return "prefill" if self.request.pending else "decoding"
