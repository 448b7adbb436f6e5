"""What mlxchat keeps of a server's slots: the plan, the replies and slots on its side, and each slot's snapshot."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mlxchat.engine.events import Event, SamplingParams, SlotSnapshot, SlotState
from mlxchat.engine.handle import RequestHandle
from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.rate import stream_rate
from mlxchat.engine.remote.server import ServerFacts, ServerSlot


@dataclass(frozen=True)
class RemotePlan(SlotPlan):
    """A slot plan whose slots are a server's: its summary says whose they are."""

    server: str = "server"

    @property
    def summary(self) -> str:
        context = f"{self.per_slot} tokens each" if self.per_slot else "context not reported"
        return f"{self.server}: {self.parallel} slot{'s' if self.parallel != 1 else ''}, {context}"


def remote_plan(facts: ServerFacts, parallel: int) -> RemotePlan:
    """The plan for `facts`: llama-server's own slots, or `parallel` chats at once on other servers."""
    n = facts.total_slots if facts.has_slots and facts.total_slots else parallel
    per_slot = facts.context or 0
    return RemotePlan(parallel, n, n * per_slot, per_slot, 0, 0, server=facts.kind)


@dataclass(frozen=True)
class RemoteInfo:
    """What the inspector says about the engine: the server and model rather than a device."""

    model: str
    device: str
    blas: str = "–"
    dtype: str = "–"
    weights_bytes: int = 0


@dataclass
class RemoteReply:
    """One reply streaming from the server."""

    handle: RequestHandle
    sampling: SamplingParams
    on_event: Callable[[Event], None] | None
    t_submit: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float | None = None
    chunks: int = 0
    text: list[str] = field(default_factory=list)  # its answer
    reasoning: list[str] = field(default_factory=list)  # its reasoning, as the server sends it apart
    reasoning_chunks: int = 0
    t_reasoned: tuple[float, float] | None = None  # when its first and last reasoning came
    stream: Any = None
    ended: bool = False
    tools: Any = None  # what the reply may call (OpenAI's function schemas)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)  # its streamed tool calls, by index
    # Held while an event is delivered, so that nothing comes after the Done (a cancel and the
    # worker may race to end the reply).
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tok_s(self) -> float:
        return stream_rate(self.chunks, self.t_first, self.t_last)

    @property
    def reasoning_now(self) -> int | None:
        """Its reasoning chunks while it reasons (the last text came as reasoning), else None."""
        reasoning = self.t_reasoned is not None and self.t_reasoned[1] == self.t_last
        return self.reasoning_chunks if reasoning else None


@dataclass
class RemoteSlot:
    """mlxchat's side of one slot: its chat's name, its reply, and what the last reply used."""

    id: int
    label: str | None = None
    reply: RemoteReply | None = None
    tokens: int = 0  # prompt + reply tokens of the last finished reply, as the server counted them
    prompt_tokens: int = 0
    cached_tokens: int = 0
    last_tok_s: float = 0.0


def slot_snapshot(slot: RemoteSlot, theirs: ServerSlot | None, per_slot: int) -> SlotSnapshot:
    """The slot as the inspector shows it: the server's /slots figures where it has them, mlxchat's own
    otherwise."""
    reply = slot.reply
    generated = reply.chunks if reply else 0
    if theirs is not None:
        if theirs.processing:
            state: SlotState = "decoding" if theirs.decoded else "prefill"
        else:  # a reply the server has not started yet (queued) is waiting for its prompt
            state = "idle" if reply is None else ("decoding" if reply.chunks else "prefill")
        return SlotSnapshot(
            id=slot.id, state=state, capacity=theirs.n_ctx, used=theirs.tokens,
            prompt_tokens=slot.prompt_tokens if not theirs.processing else theirs.tokens - theirs.decoded,
            prompt_processed=theirs.prompt_processed, cached_tokens=theirs.cached,
            generated=theirs.decoded if theirs.processing else generated,
            tok_s=reply.tok_s() if reply else slot.last_tok_s,
            sampling=reply.sampling if reply else None,
            kv_bytes_allocated=0, kv_bytes_used=0, label=slot.label,
            reasoning_tokens=reply.reasoning_now if reply else None,
        )
    state = "idle" if reply is None else ("decoding" if reply.chunks else "prefill")
    return SlotSnapshot(
        id=slot.id, state=state, capacity=per_slot, used=slot.tokens + generated,
        prompt_tokens=slot.prompt_tokens, prompt_processed=slot.prompt_tokens, cached_tokens=slot.cached_tokens,
        generated=generated, tok_s=reply.tok_s() if reply else slot.last_tok_s,
        sampling=reply.sampling if reply else None, kv_bytes_allocated=0, kv_bytes_used=0, label=slot.label,
        reasoning_tokens=reply.reasoning_now if reply else None,
    )
