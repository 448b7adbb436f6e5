"""A request on its way to an engine: the chat it answers (Messages, and the images in it) and its tools, the typed command (Submit), its
prompt as the chat template writes it (render), the `submit` both engines offer, and how its events reach the
caller (deliver). No MLX here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from mlxchat.engine.events import Done, Event, SamplingParams
from mlxchat.engine.handle import RequestHandle

# A chat as its template renders it: each message a role and its content (and, for tool calls and results,
# the fields of OpenAI's message shapes: tool_calls, tool_call_id).
Messages = Sequence[Mapping[str, Any]]
# The tools a reply may call, as the chat template takes them: OpenAI's function schemas.
Tools = Sequence[Mapping[str, Any]]


def image_paths(messages: Any) -> list[str]:
    """The image files of a chat's messages, in order (parts `{"type": "image", "path": ...}`)."""
    paths = []
    for message in messages or []:
        content = message.get("content")
        if isinstance(content, list):
            paths += [str(part["path"]) for part in content if isinstance(part, dict) and part.get("type") == "image"]
    return paths


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
    tools: Tools | None = None
    unlisted_tools: Tools | None = None  # tools it may call that the template does not list: their definitions are
    # in the conversation (found by a search); the tool parser reads their schemas

    @property
    def callable_tools(self) -> Tools | None:
        """Every tool its reply may call: those listed and those found by a search (None: no tools)."""
        return [*(self.tools or ()), *(self.unlisted_tools or ())] or None


def prompt_of(tokenizer: Any, submit: Submit) -> list[int]:
    """The request's prompt: its raw tokens, or its chat as the chat template writes it (with its tools)."""
    if submit.tokens is not None:
        return list(submit.tokens)
    return render(tokenizer, submit.messages or [], submit.sampling.thinking, submit.tools)


def render(tokenizer: Any, messages: Messages, thinking: bool = True, tools: Tools | None = None) -> list[int]:
    """A chat's tokens as the model's chat template writes them, ready for its reply. `thinking` False turns the
    template's thinking switch off (mlx-lm passes it under the name the template knows; on, it is mlx-lm's
    default: the switch is on where the model marks reasoning)."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, **template_kwargs(thinking, tools))
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def template_kwargs(thinking: bool = True, tools: Tools | None = None) -> dict[str, Any]:
    """What the chat template is given besides the messages: the thinking switch (off only) and the tools."""
    kwargs: dict[str, Any] = {} if thinking else {"enable_thinking": False}
    if tools:
        kwargs["tools"] = list(tools)
    return kwargs


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
        tools: Tools | None = None,
        unlisted_tools: Tools | None = None,
    ) -> RequestHandle:
        """Starts a reply in `slot_id` to a chat (`messages`) or to raw `tokens`; its events come on the handle
        and to `on_event`, ending with one Done. `tools`: what the reply may call (its Done names the calls), as the
        template lists them; `unlisted_tools`: those it may call besides, defined in the conversation."""
        handle = RequestHandle(next(self._request_ids), slot_id)
        self._take(Submit(handle, messages, tokens, sampling, on_event, tools, unlisted_tools))
        return handle

    def _take(self, submit: Submit) -> None:
        raise NotImplementedError
