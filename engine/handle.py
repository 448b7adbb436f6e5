"""The caller's side of a request, shared by the local and the remote engine (no MLX here)."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Iterator

from mlxchat.engine.events import Done, Event, SamplingParams

Messages = Sequence[dict[str, str]]


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


def deliver(handle: RequestHandle, on_event: Callable[[Event], None] | None, event: Event, quiet: bool = False) -> None:
    """Queues `event` for the handle, then calls the caller's callback.

    A failing callback raises (the engine ends that reply with the error) unless `quiet`, which
    an ending event is: nothing may come after a Done, so its callback's failure ends nothing.
    """
    handle.put(event)
    if on_event is None:
        return
    try:
        on_event(event)
    except Exception:
        if not quiet and not isinstance(event, Done):
            raise


@dataclass(frozen=True)
class Submit:
    """A reply asked of a slot: to a chat (`messages`, rendered with the chat template) or to raw `tokens`."""

    handle: RequestHandle
    messages: Messages | None = None
    tokens: list[int] | None = None
    sampling: SamplingParams = SamplingParams()
    on_event: Callable[[Event], None] | None = None


class TakesRequests:
    """The `submit` both engines offer: a handle at once, the request handed to `_take` (queued for the
    engine's thread, or streamed from a server)."""

    _request_ids: Iterator[int]  # each engine counts its own requests from 1

    def submit(
        self,
        slot_id: int,
        messages: Messages | None = None,
        *,
        tokens: list[int] | None = None,
        sampling: SamplingParams = SamplingParams(),
        on_event: Callable[[Event], None] | None = None,
    ) -> RequestHandle:
        """Starts a reply in `slot_id` to a chat (`messages`) or to raw `tokens`; its events come on the handle
        and to `on_event`, ending with one Done."""
        handle = RequestHandle(next(self._request_ids), slot_id)
        self._take(Submit(handle, messages, tokens, sampling, on_event))
        return handle

    def _take(self, submit: Submit) -> None:
        raise NotImplementedError
