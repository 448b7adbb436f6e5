"""How a slot's sampled tokens become its reply: text events, stop tokens, limits, and the reply's end.
The scheduler owns one ReplyStream and hands it each sampled token."""

from __future__ import annotations

import time
from typing import Any, Callable

from mlxchat.engine.events import Done, FinishReason, RequestStats, TextDelta
from mlxchat.engine.requests import deliver
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.slots import Request, Slot


class ReplyStream:
    """Streams each slot's reply from its sampled tokens, and ends it; `store()` gives the slots' KV store of
    the moment (a repartition replaces it)."""

    def __init__(self, tokenizer: Any, store: Callable[[], SlotKVStore]) -> None:
        self.tokenizer = tokenizer
        self._store = store

    def take(self, slot: Slot, token: int, next_pass: bool) -> bool:
        """Takes a sampled token; True if the reply goes on with it as its next input.

        `next_pass`: the token is already the slot's input in the pass in flight.
        """
        r, store = slot.request, self._store()
        assert r is not None
        try:
            if not self._accept(slot, r, token, room=next_pass or store.lengths[slot.id] < store.capacity):
                return False
        except Exception as exc:  # one slot's failure (e.g. its event callback) ends only that slot
            self.finish(slot, "error", f"{type(exc).__name__}: {exc}")
            return False
        if next_pass:
            slot.history.append(token)
        else:
            r.next_input = token
        return True

    def _accept(self, slot: Slot, r: Request, token: int, room: bool) -> bool:
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
        self._emit(slot, r.detokenizer.last_segment)
        if r.generated >= r.sampling.max_tokens:
            self.finish(slot, "length")
            return False
        if not room:
            self.finish(slot, "context")
            return False
        return True

    def _emit(self, slot: Slot, text: str) -> None:
        r = slot.request
        if text and r:
            r.text.append(text)
            delta = TextDelta(r.id, slot.id, text, r.unreported)
            r.unreported = 0
            deliver(r.handle, r.on_event, delta)

    def finish(self, slot: Slot, reason: FinishReason, error: str | None = None) -> None:
        r = slot.request
        if r is None:
            return
        slot.request = None
        if r.pending:  # a prefill cut short leaves only the tokens that were stored
            slot.rollback(self._store(), len(slot.history))
        tail = ""
        try:
            r.detokenizer.finalize()
            tail = r.detokenizer.last_segment
        except Exception:  # a broken detokenizer must not keep the request from ending
            pass
        if tail:
            r.text.append(tail)
            deliver(r.handle, r.on_event, TextDelta(r.id, slot.id, tail, r.unreported), quiet=True)
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
        )
        deliver(r.handle, r.on_event, Done(r.id, slot.id, reason, "".join(r.text), stats, error))
