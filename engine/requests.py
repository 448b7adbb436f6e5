"""A request on its way to an engine: the chat it answers (Messages), the typed command (Submit), the `submit`
both engines offer, and how its events reach the caller (deliver). No MLX here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Iterator

from mlxchat.engine.events import Done, Event, SamplingParams
from mlxchat.engine.handle import RequestHandle

# A chat as its template renders it: each message a role and its content.
Messages = Sequence[Mapping[str, str]]


def deliver(handle: RequestHandle, on_event: Callable[[Event], None] | None, event: Event, quiet: bool = False) -> None:
    """Gives `event` to the caller: to its callback where it gave one (the handle then keeps only the Done, for
    `result()`: a caller that streams by callback never reads the handle's events, which would pile up for
    the whole reply), else queued on the handle.

    A failing callback raises (the engine ends that reply with the error) unless `quiet`, which
    an ending event is: nothing may come after a Done, so its callback's failure ends nothing.
    """
    if on_event is None or isinstance(event, Done):
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
