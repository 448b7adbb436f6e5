"""What crosses the engine/UI boundary: sampling settings, stream events and snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# "tool": the slot's chat waits on a tool call (the user's approval, or the tool's server); the app says so.
SlotState = Literal["idle", "prefill", "decoding", "tool"]
FinishReason = Literal["stop", "length", "context", "cancelled", "error"]
Part = Literal["answer", "reasoning", "tool"]  # which part of a reply a text is (engine.reply_parts)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling; temperature 0 is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    seed: int | None = None
    ignore_eos: bool = False  # as llama-server's: decode to max_tokens (benchmarks, tests)
    thinking: bool = True  # the chat template's thinking switch (enable_thinking), for models that have one
    reasoning_budget: int | None = None  # reasoning tokens before the engine ends the reasoning (None: no cap)
    # "lookup": drafts from the chat's own tokens, checked in the batched pass (engine.speculation); the reply is the
    # same token for token where the pass is batch-invariant. "off": one token a pass.
    speculative: str = "off"


@dataclass(frozen=True)
class TextDelta:
    """New reply text for one request (always whole UTF-8 characters), and the part of the reply it is."""

    request_id: int
    slot_id: int
    text: str
    tokens: int = 1  # generated tokens this text covers (a character can span several)
    part: Part = "answer"


@dataclass(frozen=True)
class RequestStats:
    """Counts and speeds of one finished request."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    # Tokens the slot held but prefilled again: its window or recurrent layers could not roll back to the
    # common prefix (an edited or regenerated turn), so it restarted from the last exact point.
    refilled_tokens: int = 0
    generated_tokens: int = 0
    ttft_s: float = 0.0
    decode_tok_s: float = 0.0
    # Where the cached tokens came from when not the slot's own history: "parked" (the chat's KV kept
    # when it lost its slot), "disk" (saved KV, e.g. from before a restart) or "slot N" (copied from
    # another slot, e.g. for a fork).
    restored_from: str | None = None
    # Why a history this prompt continues was prefilled again: its parked KV was evicted or never kept.
    lost: str | None = None
    reasoning_tokens: int = 0  # of generated_tokens, those the reply reasoned with (its markers not counted)
    reasoning_s: float = 0.0  # from its first reasoning token to the one that ended its reasoning
    drafted_tokens: int = 0  # tokens drafted for it and checked (speculative decoding)
    accepted_tokens: int = 0  # of those, the ones the model chose too (each saved a pass)

    @property
    def cached_from(self) -> str | None:
        """Where the cached prompt tokens came from: "slot" (this slot's or another's K/V), "memory" (the
        chat's parked KV), "disk" (saved KV on disk); None when nothing was cached."""
        if not self.cached_tokens:
            return None
        return {"parked": "memory", "disk": "disk"}.get(self.restored_from or "", "slot")


@dataclass(frozen=True)
class Done:
    """The end of a request: why it ended, the whole reply (its answer, and its reasoning apart), its stats,
    and an error message if any.

    `refused` marks a request that was never started (e.g. a prompt that does not fit the slot).
    """

    request_id: int
    slot_id: int
    reason: FinishReason
    text: str
    stats: RequestStats = field(default_factory=RequestStats)
    error: str | None = None
    refused: bool = False
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # the calls the reply ended with: the caller runs them, and goes on


@dataclass(frozen=True)
class ToolCall:
    """A tool call a reply ended with, as the model's tool parser read it: the tool's name and its arguments,
    or `error` where the call could not be read (the caller answers the model with it)."""

    id: str
    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None


Event = TextDelta | Done


@dataclass(frozen=True)
class SlotSnapshot:
    """One slot as the inspector shows it (llama-server's /slots fields and more)."""

    id: int
    state: SlotState
    capacity: int
    used: int
    prompt_tokens: int
    prompt_processed: int
    cached_tokens: int
    generated: int
    tok_s: float
    sampling: SamplingParams | None
    kv_bytes_allocated: int
    kv_bytes_used: int
    label: str | None
    refilled_tokens: int = 0  # the current (or last) request's, see RequestStats
    reasoning_tokens: int | None = None  # while the reply reasons: its reasoning tokens so far, else None
    drafted: int = 0  # tokens drafted for its reply and checked so far (speculative decoding)
    accepted: int = 0  # of those, the ones the model chose too


@dataclass(frozen=True)
class ParkedSnapshot:
    """One parked conversation: the chat it belonged to, its tokens and the bytes its KV holds."""

    label: str | None
    tokens: int
    nbytes: int


@dataclass(frozen=True)
class EngineSnapshot:
    """Engine-wide figures plus every slot."""

    model: str
    device: str
    blas: str
    dtype: str
    weights_bytes: int
    kv_bytes_allocated: int
    kv_bytes_used: int
    active_bytes: int
    peak_bytes: int
    aggregate_tok_s: float
    per_slot: int
    slots: tuple[SlotSnapshot, ...]
    server: str | None = None  # a remote engine's word on where the slot figures come from
    batching: str = ""  # whether batched replies match solo ones here (engine.devices.batching_note)
    speculation: str = ""  # whether lookup drafts run for this model, and change no token (engine.speculation.notes)
    images: str = ""  # whether this model sees, and which families do ("" for a text model)
    parked: tuple[ParkedSnapshot, ...] = ()  # most recently parked first
    park_budget_bytes: int = 0
    disk: str = ""  # the saved-KV tier on disk in a line ("" when it is off)
    disk_notes: tuple[str, ...] = ()  # saved KV files ignored and removed, and why, oldest first
    widest_pass: int = 0  # the most slots one decode pass has carried since the engine started (batching at work)
    kv_dtype: str | None = None  # how the slots store K/V (None: as the model computes them, or a server's)

    @property
    def parked_bytes(self) -> int:
        """Bytes the parked conversations hold."""
        return sum(p.nbytes for p in self.parked)
