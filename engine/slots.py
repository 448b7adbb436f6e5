"""A slot's conversation state and the request it is serving."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from engine.events import Done, Event, SamplingParams, SlotState
from engine.sampling import SlotSampler


class RequestHandle:
    """The caller's side of a request: its events, in order, ending with one Done."""

    def __init__(self, request_id: int, slot_id: int) -> None:
        self.request_id = request_id
        self.slot_id = slot_id
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.done: Done | None = None

    def put(self, event: Event) -> None:
        self._events.put(event)

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Yields events as they come until Done; raises queue.Empty if one takes over `timeout`."""
        while self.done is None:
            event = self._events.get(timeout=timeout)
            if isinstance(event, Done):
                self.done = event
            yield event

    def result(self, timeout: float | None = None) -> Done:
        """Waits for the request to end and returns its Done."""
        for _ in self.events(timeout):
            pass
        assert self.done is not None
        return self.done


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
    cached: int = 0
    pending: list[int] = field(default_factory=list)
    next_input: int | None = None
    generated: int = 0
    unreported: int = 0  # generated tokens whose text has not been sent yet
    text: list[str] = field(default_factory=list)
    cancelled: bool = False
    t_submit: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float | None = None

    @property
    def prompt_processed(self) -> int:
        return len(self.prompt) - len(self.pending)

    def decode_tok_s(self) -> float:
        if self.t_first is None or self.t_last is None or self.generated < 2:
            return 0.0
        return (self.generated - 1) / max(self.t_last - self.t_first, 1e-9)


@dataclass
class Slot:
    """One of the N slots: the tokens whose K/V it stores, and the request it serves if any."""

    id: int
    history: list[int] = field(default_factory=list)
    request: Request | None = None
    label: str | None = None
    last_tok_s: float = 0.0

    @property
    def state(self) -> SlotState:
        if self.request is None:
            return "idle"
        return "prefill" if self.request.pending else "decoding"
