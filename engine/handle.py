"""The caller's side of a request, shared by the local and the remote engine (no MLX here)."""

from __future__ import annotations

import queue
from typing import Iterator

from mlxchat.engine.events import Done, Event


class RequestHandle:
    """The caller's side of a request: its events, in order, ending with one Done (only the Done where the caller
    takes the events by callback)."""

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
