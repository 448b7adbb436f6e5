"""What crosses the engine/UI boundary: sampling settings, stream events and snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SlotState = Literal["idle", "prefill", "decoding"]
FinishReason = Literal["stop", "length", "context", "cancelled", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling; temperature 0 is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    seed: int | None = None
    ignore_eos: bool = False  # as llama-server's: decode to max_tokens (benchmarks, tests)


@dataclass(frozen=True)
class TextDelta:
    """New reply text for one request (always whole UTF-8 characters)."""

    request_id: int
    slot_id: int
    text: str
    tokens: int = 1  # generated tokens this text covers (a character can span several)


@dataclass(frozen=True)
class RequestStats:
    """Counts and speeds of one finished request."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    generated_tokens: int = 0
    ttft_s: float = 0.0
    decode_tok_s: float = 0.0


@dataclass(frozen=True)
class Done:
    """The end of a request: why it ended, the whole reply, its stats, and an error message if any.

    `refused` marks a request that was never started (e.g. a prompt that does not fit the slot).
    """

    request_id: int
    slot_id: int
    reason: FinishReason
    text: str
    stats: RequestStats = field(default_factory=RequestStats)
    error: str | None = None
    refused: bool = False


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
