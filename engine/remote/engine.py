"""The remote engine: the local Engine's API and events over an OpenAI-compatible server.

Each reply streams on a worker thread of its own through the `openai` client; its text and its end
come out as the same TextDelta and Done events the local engine sends, so the chats, the panes and
the saved history do not know which engine they talk to. With llama-server, chat N is pinned to the
server's slot N (`id_slot`), so the server's prompt cache follows the chat and its /slots is the
slot view; other servers have no slots to show, and mlxchat shows what it knows from its side.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

import openai

from mlxchat.engine import reply_refusals as refusals
from mlxchat.engine.events import Done, EngineSnapshot, FinishReason, Part, RequestStats, TextDelta, ToolCall
from mlxchat.engine.requests import Messages, Submit, TakesRequests, Tools, deliver, image_paths
from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.rate import RateMeter
from mlxchat.engine.remote.images import ImageUnreadable, openai_content, refuses_images
from mlxchat.engine.remote.server import ServerFacts, ServerSlot, describe_error, erase_slot, make_client, read_slots
from mlxchat.engine.remote.state import RemoteInfo, RemoteReply, RemoteSlot, slot_snapshot

SLOTS_POLL_S = 0.5  # how often /slots is read while someone looks at the snapshot
RETRY = "regenerate (ctrl+r) to try again"


class RemoteEngine(TakesRequests):
    """N slots over a server; `submit` a chat to a slot and read its events from the handle.

    Thread-safe like the local Engine: the UI, a test or a worker may call any method.
    """

    def __init__(self, facts: ServerFacts, plan: SlotPlan, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        self.facts = facts
        self.plan = plan
        self.info = RemoteInfo(model=facts.model_name, device=f"{facts.kind} at {facts.base_url}")
        self._client = make_client(facts.base_url, api_key, timeout)
        self._lock = threading.Lock()
        self._slots = [RemoteSlot(i) for i in range(plan.parallel)]
        self._request_ids = itertools.count(1)
        self._rate = RateMeter()
        self._server_slots: tuple[ServerSlot, ...] | None = facts.slots
        self._slots_note = facts.slots_note
        self._polling = False
        self._polled = 0.0
        self._closed = False

    # ---- the local Engine's API ----

    def _take(self, submit: Submit) -> None:
        handle, messages = submit.handle, submit.messages
        reply = RemoteReply(handle, submit.sampling, submit.on_event, tools=submit.tools)
        with self._lock:
            slot_id = handle.slot_id
            slot = self._slots[slot_id] if 0 <= slot_id < len(self._slots) else None
            problem = self._refusal(slot_id, slot, messages, submit.tokens)
            if slot is not None and problem is None:
                slot.reply = reply
        if problem is not None:
            self._end(reply, "error", error=problem, refused=True)
            return
        threading.Thread(target=self._stream, args=(reply, list(messages or [])), name=f"mlxchat-remote-{slot_id}",
                         daemon=True).start()

    def cancel(self, slot_id: int) -> None:
        """Stops the slot's reply now: what came is kept, marked cancelled, and the stream is closed."""
        with self._lock:
            slot = self._slots[slot_id] if 0 <= slot_id < len(self._slots) else None
            reply = slot.reply if slot else None
        if reply is not None:
            self._end(reply, "cancelled")

    def clear(self, slot_id: int) -> None:
        """Stops the slot's reply and forgets mlxchat's figures for it; asks llama-server to erase the
        slot's cache too, which it does when it was started with --slot-save-path (else it keeps it)."""
        self.cancel(slot_id)
        with self._lock:
            if 0 <= slot_id < len(self._slots):
                label = self._slots[slot_id].label
                self._slots[slot_id] = RemoteSlot(slot_id, label)
        if self.facts.has_slots:
            threading.Thread(target=erase_slot, args=(self._client, self.facts.base_url, slot_id), daemon=True).start()

    def bind(self, slot_id: int, label: str | None) -> None:
        """Names what the slot serves (a chat's title), for the snapshot."""
        with self._lock:
            if 0 <= slot_id < len(self._slots):
                self._slots[slot_id].label = label

    def repartition(self, plan: SlotPlan) -> "Future[dict[int, bool]]":
        """llama-server's slots are its own (--parallel): refused. On other servers `plan.parallel` is how
        many chats may generate at once, mlxchat's own limit: replies on slots that go are stopped."""
        future: Future[dict[int, bool]] = Future()
        if self.facts.has_slots:
            future.set_exception(ValueError(
                f"the slots are llama-server's own ({self.facts.total_slots}, its --parallel): mlxchat cannot "
                f"change them; restart the server with another --parallel to have more or fewer"
            ))
            return future
        with self._lock:
            old, n = self._slots, plan.parallel
            self._slots = old[:n] + [RemoteSlot(i) for i in range(len(old), n)]
            self.plan = plan
        for slot in old[n:]:
            if slot.reply is not None:
                self._end(slot.reply, "cancelled")
        future.set_result({s.id: s.id < n for s in old})
        return future

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops every reply (as cancelled) and closes the connection to the server."""
        self._closed = True
        for slot in list(self._slots):
            self.cancel(slot.id)
        self._client.close()

    @property
    def alive(self) -> bool:
        return not self._closed

    def count_tokens(self, messages: Messages, tools: Tools | None = None) -> int | None:
        """None: the server's template and tokenizer are its own."""
        return None

    def image_tokens(self, path: str) -> int | None:
        """None: the server counts an image's tokens itself (its usage says how many the prompt took)."""
        return None

    def snapshot(self) -> EngineSnapshot:
        """Every slot: the server's /slots figures where it has them, mlxchat's own otherwise."""
        self._poll_slots()
        with self._lock:
            server = {s.id: s for s in self._server_slots or ()}
            slots = tuple(slot_snapshot(s, server.get(s.id), self.plan.per_slot) for s in self._slots)
            note = self._slots_note
        return EngineSnapshot(
            model=self.info.model,
            device=self.info.device,
            blas=self.info.blas,
            dtype=self.info.dtype,
            weights_bytes=self.info.weights_bytes,
            kv_bytes_allocated=0,
            kv_bytes_used=0,
            active_bytes=0,
            peak_bytes=0,
            aggregate_tok_s=self._rate.tok_s(),
            per_slot=self.plan.per_slot,
            slots=slots,
            server=note,
            images=self.facts.images_note,
        )

    # ---- streaming, on a worker thread per reply ----

    def _refusal(
        self, slot_id: int, slot: RemoteSlot | None, messages: Messages | None, tokens: list[int] | None
    ) -> str | None:
        if self._closed:
            return refusals.SHUT_DOWN
        if slot is None:
            return refusals.no_such_slot(slot_id, len(self._slots))
        if slot.reply is not None:
            return refusals.still_answering(slot.id)
        if tokens is not None:
            return f"the {self.facts.kind} takes chats, not raw tokens"
        if not messages:
            return refusals.EMPTY
        if self.facts.sees is False and image_paths(messages):
            return self.facts.images_refused("its /props says it has no vision", _without_images(messages))
        return None

    def _request(self, reply: RemoteReply, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The chat completion's arguments: the standard ones, and the server's own in extra_body."""
        s = reply.sampling
        extra: dict[str, Any] = {}
        if s.top_k:
            extra["top_k"] = s.top_k
        if s.ignore_eos:
            extra["ignore_eos"] = True
        if not s.thinking:  # the template's switch, as llama-server and mlx_lm.server take it
            extra["chat_template_kwargs"] = {"enable_thinking": False}
        if self.facts.has_slots:
            # The chat keeps its slot on the server, so the server's prompt cache follows it.
            extra["id_slot"] = reply.handle.slot_id
        args: dict[str, Any] = {
            "model": self.facts.model,
            "messages": [_openai_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "extra_body": extra,
        }
        if s.seed is not None:
            args["seed"] = s.seed
        if reply.tools:
            args["tools"] = list(reply.tools)
        return args

    def _stream(self, reply: RemoteReply, messages: list[dict[str, str]]) -> None:
        """Streams one reply into events; whatever happens, it ends with exactly one Done."""
        url = self.facts.base_url
        usage: Any = None
        finish: str | None = None
        try:
            request = self._request(reply, messages)
        except ImageUnreadable as exc:
            self._end(reply, "error", error=str(exc), refused=True)
            return
        try:
            stream = self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            said = describe_error(exc, url)
            if image_paths(messages) and refuses_images(said):  # (llama-server says so with a 500: no retry helps)
                self._end(reply, "error", error=self.facts.images_refused(said, _without_images(messages)),
                          refused=True)
                return
            # 4xx: the server read the request and will not take it as it is (a prompt too long...):
            # refused, as the local engine refuses what does not fit. 5xx: its failure, worth a retry.
            client_error = 400 <= exc.status_code < 500
            suffix = "" if client_error else f"; {RETRY}"
            self._end(reply, "error", error=said + suffix, refused=client_error)
            return
        except Exception as exc:  # cannot connect, timed out: the message stays, to be retried
            self._end(reply, "error", error=f"{describe_error(exc, url)}; {RETRY}")
            return
        reply.stream = stream
        try:
            if reply.ended:  # cancelled while connecting
                return
            for chunk in stream:
                if reply.ended:
                    return
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                for choice in chunk.choices or ():
                    delta = choice.delta
                    # Reasoning comes apart from the answer: `reasoning_content` (llama-server) or `reasoning`
                    # (mlx_lm.server), fields of the server's own beside the standard `content`.
                    for part, field in (("reasoning", "reasoning_content"), ("reasoning", "reasoning"),
                                        ("answer", "content")):
                        text = getattr(delta, field, None) if delta else None
                        if text:
                            self._delta(reply, text, part)
                    for call in (getattr(delta, "tool_calls", None) or ()) if delta else ():
                        _gather_call(reply, call)
                    finish = choice.finish_reason or finish
        except Exception as exc:
            if not reply.ended:
                self._end(reply, "error", error=self._dropped(reply, exc), usage=usage)
            return
        finally:
            _close(stream)
        if finish is None:
            self._end(reply, "error", error=self._dropped(reply, None), usage=usage)
        else:
            self._end(reply, *self._reason(reply, finish, usage), usage=usage)

    def _dropped(self, reply: RemoteReply, exc: BaseException | None) -> str:
        """Why a stream ended before its reply did: the connection broke, or the server sent an error."""
        kept = "what came is kept" if reply.chunks else "nothing had come yet"
        if isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIConnectionError):
            return f"the server at {self.facts.base_url} ended the reply with an error ({exc.message}): {kept}; {RETRY}"
        # The client wraps a broken connection in a bare "Connection error.": the cause says more.
        cause = (exc.__cause__ or exc) if isinstance(exc, openai.APIConnectionError) else exc
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return f"the server at {self.facts.base_url} stopped sending before the reply ended{why}: {kept}; {RETRY}"

    def _reason(self, reply: RemoteReply, finish: str, usage: Any) -> tuple[FinishReason, str | None]:
        """The local engine's reason for the server's finish_reason (with an error message for an odd one)."""
        if finish == "length":
            generated = getattr(usage, "completion_tokens", None) or reply.chunks
            # Ended short of max_tokens: the server's context for the request is full.
            return ("length" if generated >= reply.sampling.max_tokens else "context"), None
        if finish == "content_filter":
            return "error", "the server filtered the reply (finish_reason content_filter)"
        return "stop", None  # stop, tool_calls, eos...

    def _delta(self, reply: RemoteReply, text: str, part: Part) -> None:
        now = time.perf_counter()
        with reply.lock:
            if reply.ended:
                return
            with self._lock:
                reply.t_first = reply.t_first or now
                reply.t_last = now
                reply.chunks += 1
                if part == "reasoning":
                    reply.reasoning.append(text)
                    reply.reasoning_chunks += 1
                    reply.t_reasoned = ((reply.t_reasoned or (now, now))[0], now)
                else:
                    reply.text.append(text)
            self._rate.record(1)
            try:
                delta = TextDelta(reply.handle.request_id, reply.handle.slot_id, text, 1, part)
                deliver(reply.handle, reply.on_event, delta)
                return
            except Exception as exc:  # the caller's callback failed: this reply ends with it, as locally
                failure = f"{type(exc).__name__}: {exc}"
        self._end(reply, "error", error=failure)

    def _end(
        self, reply: RemoteReply, reason: FinishReason, error: str | None = None, refused: bool = False,
        usage: Any = None,
    ) -> None:
        """Ends the reply once: frees its slot, closes its stream if it was stopped, sends its Done."""
        with reply.lock:
            if reply.ended:
                return
            reply.ended = True
            stats = _stats(reply, usage)
            with self._lock:
                slot = next((s for s in self._slots if s.reply is reply), None)
                if slot is not None:
                    slot.reply = None
                    slot.last_tok_s = stats.decode_tok_s
                    if usage is not None:
                        slot.prompt_tokens, slot.cached_tokens = stats.prompt_tokens, stats.cached_tokens
                        slot.tokens = stats.prompt_tokens + stats.generated_tokens
            if reason == "cancelled" and reply.stream is not None:
                # Closing the connection is how a client stops a server's generation; it must not hold
                # up the caller (the UI) if the socket is slow to close.
                threading.Thread(target=_close, args=(reply.stream,), daemon=True).start()
            text = "".join(reply.text)
            done = Done(reply.handle.request_id, reply.handle.slot_id, reason, text, stats, error, refused,
                        reasoning="".join(reply.reasoning), tool_calls=_tool_calls(reply))
            deliver(reply.handle, reply.on_event, done)

    # ---- the slot view ----

    def _poll_slots(self) -> None:
        """Reads llama-server's /slots in the background when the last reading is old (never blocks)."""
        if not self.facts.has_slots or self._closed:
            return
        with self._lock:
            if self._polling or time.monotonic() - self._polled < SLOTS_POLL_S:
                return
            self._polling = True

        def poll() -> None:
            slots, note = read_slots(self._client, self.facts.base_url)
            with self._lock:
                self._server_slots, self._slots_note = slots, note
                self._polled, self._polling = time.monotonic(), False

        threading.Thread(target=poll, name="mlxchat-remote-slots", daemon=True).start()


def _without_images(messages: Messages) -> str:
    """How a chat whose images the server refuses can do without them: its new message's taken off, or earlier ones'
    left behind."""
    if image_paths(messages[-1:]):
        return "take the image off"
    return "its earlier messages carry images: start a new chat, or fork this one before them"


def _stats(reply: RemoteReply, usage: Any) -> RequestStats:
    """The request's figures: the server's usage where it sent one, else what mlxchat counted."""
    prompt = getattr(usage, "prompt_tokens", None) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return RequestStats(
        prompt_tokens=prompt,
        cached_tokens=cached,
        prefilled_tokens=max(prompt - cached, 0),
        generated_tokens=getattr(usage, "completion_tokens", None) or reply.chunks,
        ttft_s=(reply.t_first - reply.t_submit) if reply.t_first else 0.0,
        decode_tok_s=reply.tok_s(),
        # A chunk a token, as the servers stream them; its duration from its first reasoning chunk to its last.
        reasoning_tokens=reply.reasoning_chunks,
        reasoning_s=(reply.t_reasoned[1] - reply.t_reasoned[0]) if reply.t_reasoned else 0.0,
    )


def _openai_message(message: Any) -> dict[str, Any]:
    """A chat message as the API takes it: its images as image_url parts, a call's arguments as JSON text (the
    chats keep them as objects)."""
    message = dict(message)
    if isinstance(message.get("content"), list):
        message["content"] = openai_content(message["content"])
    if message.get("tool_calls"):
        message["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
            if not isinstance(call["function"]["arguments"], str) else call
            for call in message["tool_calls"]
        ]
    return message


def _gather_call(reply: RemoteReply, delta: Any) -> None:
    """Adds a streamed piece of a tool call (its id and name come first, its arguments' JSON in pieces)."""
    call = reply.calls.setdefault(getattr(delta, "index", None) or 0, {"id": "", "name": "", "arguments": ""})
    function = getattr(delta, "function", None)
    call["id"] = getattr(delta, "id", None) or call["id"]
    call["name"] += getattr(function, "name", None) or ""
    call["arguments"] += getattr(function, "arguments", None) or ""


def _tool_calls(reply: RemoteReply) -> tuple[ToolCall, ...]:
    """The calls the server streamed, their arguments read (a call whose JSON does not parse carries the error)."""
    calls = []
    for index, call in sorted(reply.calls.items()):
        call_id = call["id"] or f"call_{reply.handle.request_id}_{index}"
        try:
            arguments = json.loads(call["arguments"] or "{}")
            calls.append(ToolCall(call_id, call["name"], arguments if isinstance(arguments, dict) else {}))
        except ValueError as exc:
            calls.append(ToolCall(call_id, call["name"], {"text": call["arguments"]}, f"cannot read the call: {exc}"))
    return tuple(calls)


def _close(stream: Any) -> None:
    try:
        stream.close()
    except Exception:  # a connection that is already gone is closed enough
        pass
