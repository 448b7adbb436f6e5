"""How a slot's sampled tokens become its reply: text events, stop tokens, limits, and the reply's end.
The scheduler owns one ReplyStream and hands it each sampled token."""

from __future__ import annotations

import time
from typing import Any, Callable

from mlxchat.engine.events import Done, FinishReason, Part, RequestStats, SamplingParams, TextDelta
from mlxchat.engine.requests import deliver
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.reply_parts import ReasoningFormat, ReplySplit, tool_calls
from mlxchat.engine.slots import Request, Slot


class ReplyStream:
    """Streams each slot's reply from its sampled tokens, and ends it; `store()` gives the slots' KV store of
    the moment (a repartition replaces it)."""

    def __init__(self, tokenizer: Any, store: Callable[[], SlotKVStore]) -> None:
        self.tokenizer = tokenizer
        self.format = ReasoningFormat(tokenizer)
        self._store = store

    def scan(self, on: bool) -> None:
        """Whether the replies that start from now on are split into reasoning and answer (the bench turns it off
        to measure what the split costs)."""
        self.format = ReasoningFormat(self.tokenizer, scan=on)

    def split(self, prompt: list[int], sampling: SamplingParams, tools: Any) -> ReplySplit:
        """The splitter of a reply to `prompt` into its parts (`tools`: those offered it, if any)."""
        return self.format.split(prompt, sampling.reasoning_budget, bool(tools))

    def take(self, slot: Slot, token: int, next_pass: bool) -> bool:
        """Takes a sampled token; True if the reply goes on with it as its next input.

        `next_pass`: the token is already the slot's input in the pass in flight. Where the reply's reasoning
        has spent its budget, the tokens that end it are taken in place of the sampled ones (and the scheduler
        feeds them: `Request.forced`), as llama.cpp's --reasoning-budget does.
        """
        r, store = slot.request, self._store()
        assert r is not None
        self._force_end(r)
        forced = bool(r.forced)
        token = r.forced.pop(0) if forced else token
        try:
            if not self._accept(slot, r, token, next_pass or store.lengths[slot.id] < store.capacity, not forced):
                return False
            self._force_end(r)
        except Exception as exc:  # one slot's failure (e.g. its event callback) ends only that slot
            self.finish(slot, "error", f"{type(exc).__name__}: {exc}")
            return False
        if next_pass:
            slot.history.append(token)
        else:
            r.next_input = token
        return True

    def _force_end(self, r: Request) -> None:
        if r.split.spent and not r.forced:
            r.split.budget = None  # (once: a reply that reasons again later is not cut again)
            r.forced = list(self.format.end_tokens)

    def _accept(self, slot: Slot, r: Request, token: int, room: bool, counted: bool) -> bool:
        """Streams a sampled token; ends the reply on a stop token or a limit (False), else True."""
        now = time.perf_counter()
        r.t_first = r.t_first or now
        r.t_last = now
        if token in self.tokenizer.eos_token_ids and not r.sampling.ignore_eos:
            self.finish(slot, "stop")
            return False
        r.generated += 1
        r.unreported += 1
        r.detokenizer.add_token(token)
        self._emit(slot, r.split.take(r.detokenizer.last_segment, now, counted))
        if r.generated >= r.sampling.max_tokens:
            self.finish(slot, "length")
            return False
        if not room:
            self.finish(slot, "context")
            return False
        return True

    def _emit(self, slot: Slot, parts: list[tuple[Part, str]], quiet: bool = False) -> None:
        """Sends a token's text, part by part (the first carries the tokens not reported yet)."""
        r = slot.request
        assert r is not None
        for part, text in parts:
            if part == "answer":
                r.text.append(text)
            delta = TextDelta(r.id, slot.id, text, r.unreported, part)
            r.unreported = 0
            deliver(r.handle, r.on_event, delta, quiet=quiet)

    def finish(self, slot: Slot, reason: FinishReason, error: str | None = None) -> None:
        r = slot.request
        if r is None:
            return
        if r.pending:  # a prefill cut short leaves only the tokens that were stored
            slot.rollback(self._store(), len(slot.history))
        if r.images is not None:
            r.images.drop()
        tail = ""
        try:
            r.detokenizer.finalize()
            tail = r.detokenizer.last_segment
        except Exception:  # a broken detokenizer must not keep the request from ending
            pass
        self._emit(slot, r.split.take(tail, r.t_last or 0.0, counted=False) + r.split.flush(), quiet=True)
        slot.request = None
        slot.last_tok_s = r.decode_tok_s()
        slot.last_refilled = r.refilled
        stats = RequestStats(
            prompt_tokens=len(r.prompt),
            cached_tokens=r.cached,
            refilled_tokens=r.refilled,
            prefilled_tokens=r.prompt_processed - r.cached,
            generated_tokens=r.generated,
            ttft_s=(r.t_first - r.t_submit) if r.t_first else 0.0,
            decode_tok_s=slot.last_tok_s,
            restored_from=r.restored_from,
            lost=r.lost,
            reasoning_tokens=r.split.reasoning_tokens,
            reasoning_s=r.split.reasoning_s,
            drafted_tokens=r.drafted,
            accepted_tokens=r.accepted,
        )
        reasoning = "".join(r.split.reasoning_text)
        calls = tool_calls(self.tokenizer, r.split.tool_texts, r.tools, r.id)
        deliver(r.handle, r.on_event, Done(r.id, slot.id, reason, "".join(r.text), stats, error, reasoning=reasoning,
                                           tool_calls=calls))
