"""The engine: one thread owns the model and N slots, and runs every slot's step in batched passes."""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx
from mlx_lm.utils import common_prefix_len

from mlxchat.engine.kv import attention as slot_attention
from mlxchat.engine.forward import Forward
from mlxchat.engine.cpu.blas import blas_workers
from mlxchat.engine.cpu.priority import run_below_ui
from mlxchat.engine.devices import release_thread_streams
from mlxchat.engine.events import (
    Done,
    EngineSnapshot,
    Event,
    FinishReason,
    ParkedSnapshot,
    RequestStats,
    SamplingParams,
    SlotSnapshot,
    TextDelta,
)
from mlxchat.engine.kv.parked import ParkedEntry, ParkedStore
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.loading.batch_check import check_batching
from mlxchat.engine.loading.families import UnsupportedFamily, layer_kinds, slot_store
from mlxchat.engine.loading.lazy import STREAM_HELP, is_stream_error, materialize
from mlxchat.engine.memory import DEFAULT_PARK_BUDGET_MB
from mlxchat.engine.sampling import SlotSampler, sample_rows
from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.chat_engine import Messages
from mlxchat.engine.slots import Request, RequestHandle, Slot

_STOP = object()
RATE_WINDOW_S = 2.0  # aggregate tok/s is measured over the last steps in this window
# Most prompt tokens in one prefill pass (all rows together): bounds how long decoding slots
# wait for a new prompt, while letting prompts that arrive together share a pass.
PREFILL_BUDGET = 512
# A submit that keeps less than this share of a slot's history takes the slot for another conversation:
# the one it held is parked first (an ordinary next turn keeps nearly all of it).
CHANGES_HANDS = 0.5
# Fewer shared tokens than this (a chat template's opening) are cheaper to prefill than a state to copy.
RESTORE_MIN = 16


@dataclass
class _DecodePass:
    """A decode pass in flight: which (slot, request) each row serves, and its sampled tokens."""

    rows: list[tuple[Slot, Request]]
    tokens: mx.array


@dataclass(frozen=True)
class EngineInfo:
    """What the engine reports about the model it runs (shown by the inspector and bench)."""

    model: str = ""
    device: str = ""
    blas: str = ""
    dtype: str = ""
    weights_bytes: int = 0
    batching: str = ""  # engine.devices.batching_note for the device and dtype


class Engine:
    """N slots over one model; `submit` a chat to a slot and read its events from the handle.

    Every MLX call happens on the engine's own thread; the public methods only queue commands,
    so they are safe to call from any thread (a UI's, a test's).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        plan: SlotPlan,
        *,
        info: EngineInfo = EngineInfo(),
        prefill_chunk: int = 256,
        split: bool | None = None,
        park_budget_bytes: int = DEFAULT_PARK_BUDGET_MB * 2**20,
        nice: int = 0,
        padded_prefill: bool | None = None,
    ) -> None:
        """`split`: how the CPU llama path runs its matmuls (engine.forward.Forward; None: its default).
        `nice`: on Linux, the nice value the engine's threads run at (engine.cpu.priority; 0: the caller's).
        `padded_prefill`: whether prompts of different lengths may share a prefill pass (LoadedModel.batching;
        None: checked here, on the calling thread, as load_model does)."""
        if not plan.ok:
            raise ValueError("; ".join(plan.errors))
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.prefill_chunk = prefill_chunk
        self.plan = plan
        try:
            layer_kinds(model)
            if padded_prefill is None:
                padded_prefill = check_batching(model).padded_prefill
        except UnsupportedFamily as exc:
            raise ValueError(str(exc)) from exc
        self.padded_prefill = padded_prefill
        try:
            materialize(model)
        except RuntimeError as exc:
            if is_stream_error(exc):
                raise ValueError(STREAM_HELP) from exc
            raise
        self.per_slot_dispatch = slot_attention.install(model)
        self._forward = Forward(model, split)
        self._pass: _DecodePass | None = None
        self.slots = [Slot(i) for i in range(plan.parallel)]
        self.store = self._new_store(plan)
        self.parked = ParkedStore(park_budget_bytes)
        self._parked_view: tuple[ParkedSnapshot, ...] = ()  # what snapshot() shows, set on the engine thread
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._rr = 0
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._memory = (0, 0)
        self._nice = nice
        self._thread = threading.Thread(target=self._run, name="mlxchat-engine", daemon=True)
        self._thread.start()

    # ---- public API (any thread) ----

    def submit(
        self,
        slot_id: int,
        messages: Messages | None = None,
        *,
        tokens: list[int] | None = None,
        sampling: SamplingParams = SamplingParams(),
        on_event: Callable[[Event], None] | None = None,
    ) -> RequestHandle:
        """Starts a reply in `slot_id` to a chat (`messages`, rendered with the chat template) or to raw `tokens`."""
        handle = RequestHandle(next(self._ids), slot_id)
        self._commands.put(("submit", handle, messages, tokens, sampling, on_event))
        return handle

    def cancel(self, slot_id: int) -> None:
        """Stops the slot's reply at the next step; what was written is kept and marked cancelled."""
        self._commands.put(("cancel", slot_id))

    def clear(self, slot_id: int, park: bool = True) -> None:
        """Empties the slot (cancelling its reply first); with `park` its cached conversation is kept in the
        parked store, so a prompt that continues it later gets it back instead of a prefill."""
        self._commands.put(("clear", slot_id, park))

    def bind(self, slot_id: int, label: str | None) -> None:
        """Names what the slot serves (a chat's title), for the snapshot."""
        self._commands.put(("bind", slot_id, label))

    def repartition(self, plan: SlotPlan) -> "Future[dict[int, bool]]":
        """Rebuilds the slots for `plan`; resolves to {old slot id: whether its cached KV survived}."""
        future: Future[dict[int, bool]] = Future()
        self._commands.put(("repartition", plan, future))
        return future

    def call(self, fn: Callable[[], Any]) -> "Future[Any]":
        """Runs `fn` on the engine thread between steps (for work that must touch MLX)."""
        future: Future[Any] = Future()
        self._commands.put(("call", fn, future))
        return future

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the thread after the current step; active requests end as cancelled."""
        self._commands.put(_STOP)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> EngineSnapshot:
        """Every slot's state and the engine-wide figures, as of the last step."""
        store = self.store
        slots = []
        for s in self.slots:
            r = s.request
            used = store.lengths[s.id] if s.id < store.n_slots else 0
            slots.append(
                SlotSnapshot(
                    id=s.id,
                    state=s.state,
                    capacity=store.capacity,
                    used=used,
                    prompt_tokens=len(r.prompt) if r else 0,
                    prompt_processed=r.prompt_processed if r else 0,
                    cached_tokens=r.cached if r else 0,
                    refilled_tokens=r.refilled if r else s.last_refilled,
                    generated=r.generated if r else 0,
                    tok_s=r.decode_tok_s() if r else s.last_tok_s,
                    sampling=r.sampling if r else None,
                    kv_bytes_allocated=store.nbytes // store.n_slots,
                    kv_bytes_used=store.bytes_used(s.id) if s.id < store.n_slots else 0,
                    label=s.label,
                )
            )
        active, peak = self._memory
        return EngineSnapshot(
            model=self.info.model,
            device=self.info.device,
            blas=self.info.blas,
            dtype=self.info.dtype,
            weights_bytes=self.info.weights_bytes,
            kv_bytes_allocated=store.nbytes,
            kv_bytes_used=sum(store.bytes_used(i) for i in range(store.n_slots)),
            active_bytes=active,
            peak_bytes=peak,
            aggregate_tok_s=self._aggregate_tok_s(),
            per_slot=store.capacity,
            slots=tuple(slots),
            batching=self.info.batching,
            parked=self._parked_view,
            park_budget_bytes=self.parked.budget,
        )

    # ---- the engine thread ----

    def _run(self) -> None:
        run_below_ui(self._nice, blas_workers())
        try:
            while True:
                if not self._busy():
                    self._forward.working(False)
                if not self._drain(block=not self._busy()):
                    break
                if self._busy():
                    self._forward.working(True)
                    try:
                        self._step()
                    except Exception as exc:  # never a silent end: every reply in the step ends with the error
                        self._fail_all(exc)
        finally:
            self._settle()
            self._forward.working(False)
            for s in self.slots:
                if s.request:
                    self._finish(s, "cancelled")
            release_thread_streams()

    def _busy(self) -> bool:
        return self._pass is not None or any(s.request for s in self.slots)

    def _settle(self) -> None:
        """Reads the decode pass in flight, if any, so that slots and K/V are consistent again."""
        if self._pass is not None:
            finished, self._pass = self._pass, None
            self._read(finished)

    def _drain(self, block: bool) -> bool:
        """Handles queued commands; False once shutdown was asked for."""
        while True:
            try:
                cmd = self._commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if cmd is _STOP:
                return False
            try:
                self._handle(cmd)
            except Exception as exc:  # a command that fails answers its caller; the thread goes on
                if cmd[0] == "submit":
                    self._submit_failed(cmd[1], cmd[5], exc)

    def _handle(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "submit":
            self._start(*cmd[1:])
        elif kind == "cancel":
            slot = self._slot(cmd[1])
            if slot and slot.request:
                slot.request.cancelled = True
        elif kind == "clear":
            slot = self._slot(cmd[1])
            if slot:
                if slot.request:
                    self._finish(slot, "cancelled")
                if cmd[2]:
                    self._park(slot)
                self._rollback(slot, 0)
        elif kind == "bind":
            slot = self._slot(cmd[1])
            if slot:
                slot.label = cmd[2]
        elif kind == "repartition":
            _resolve(cmd[2], lambda: self._repartition(cmd[1]))
        elif kind == "call":
            _resolve(cmd[2], cmd[1])

    def _submit_failed(self, handle: RequestHandle, on_event: Callable[[Event], None] | None, exc: Exception) -> None:
        """A request that failed before it started ends with the error; its slot starts over (its cache may be half-moved)."""
        done = Done(handle.request_id, handle.slot_id, "error", "", error=_message(exc))
        _deliver(handle, on_event, done, quiet=True)
        slot = self._slot(handle.slot_id)
        if slot is not None and slot.request is None:
            self._rollback(slot, 0)

    def _slot(self, slot_id: int) -> Slot | None:
        return self.slots[slot_id] if 0 <= slot_id < len(self.slots) else None

    def _start(
        self,
        handle: RequestHandle,
        messages: Messages | None,
        tokens: list[int] | None,
        sampling: SamplingParams,
        on_event: Callable[[Event], None] | None,
    ) -> None:
        slot = self._slot(handle.slot_id)

        def refuse(message: str) -> None:
            done = Done(handle.request_id, handle.slot_id, "error", "", error=message, refused=True)
            _deliver(handle, on_event, done)

        if slot is None:
            return refuse(f"there is no slot {handle.slot_id}: the engine has {len(self.slots)} slots")
        if slot.request is not None:
            return refuse(f"slot {slot.id} is still answering: stop its reply first")
        try:
            prompt = list(tokens) if tokens is not None else self._render(messages or [])
        except Exception as exc:  # a template that rejects the chat is this request's problem only
            return refuse(f"the chat could not be rendered with the model's template: {exc}")
        capacity = self.store.capacity
        if len(prompt) + 1 > capacity:
            return refuse(
                f"this message needs {len(prompt)} tokens of context but slot {slot.id} holds "
                f"{capacity} ({self.plan.ctx_size} / {self.plan.parallel} slots): shorten it, "
                f"start a new chat, or use fewer slots"
            )
        if not prompt:
            return refuse("there is nothing to answer: the prompt is empty")
        # At least one prompt token must go through the model to give the first reply's logits.
        limit = len(prompt) - 1
        common = min(common_prefix_len(slot.history, prompt), limit)
        # A window or recurrent layer may not go back that far: then the slot starts over.
        exact = self.store.exact_prefix(slot.id, common)
        restored_from = self._restore(slot, prompt, limit, exact)
        if restored_from is None:
            if exact < CHANGES_HANDS * len(slot.history):
                self._park(slot)
            self._rollback(slot, exact)
        cached = len(slot.history)
        slot.request = Request(
            id=handle.request_id,
            handle=handle,
            prompt=prompt,
            sampling=sampling,
            sampler=SlotSampler(sampling),
            detokenizer=self.tokenizer.detokenizer,
            on_event=on_event,
            cached=cached,
            refilled=max(0, common - cached),
            pending=prompt[cached:],
            restored_from=restored_from,
            lost=self.parked.why_lost(prompt, cached),
        )

    def _restore(self, slot: Slot, prompt: list[int], limit: int, exact: int) -> str | None:
        """Puts into `slot` the parked conversation or the other slot's (copied) that gives `prompt` more
        of its prefix than the slot's own `exact` tokens; says where it came from, or None.

        Window and recurrent layers are only taken back at a length they can roll back to (for a
        recurrent state, its whole history), as the slot's own history is.
        """
        best, source = exact + RESTORE_MIN - 1, None
        for key, entry in self.parked.entries.items():
            n = self.store.exact_within(len(entry.tokens), min(common_prefix_len(entry.tokens, prompt), limit))
            if n > best:
                best, source = n, key
        for other in self.slots:
            if other is not slot:
                n = self.store.exact_prefix(other.id, min(common_prefix_len(other.history, prompt), limit))
                if n > best:
                    best, source = n, other
        if source is None:
            return None
        if isinstance(source, Slot):
            state, _ = self.store.save(source.id)
            tokens, where = list(source.history), f"slot {source.id}"
        else:
            entry = self.parked.entries[source]
            state, tokens, where = entry.state, list(entry.tokens), "parked"
            # Most of it is in the slot now (the rest, a reply as generated, is what its next prompt
            # re-tokenizes): the entry moves, and is parked again when the slot changes hands. A branch
            # that shares less (a fork at an earlier message) leaves it for the chat itself.
            if best >= CHANGES_HANDS * len(entry.tokens):
                self.parked.take(source)
            else:
                self.parked.touch(source)
            self._publish_parked()
        self._park(slot)
        self.store.load(slot.id, state, len(tokens))
        slot.history = tokens
        self._rollback(slot, best)
        return where

    def _park(self, slot: Slot) -> None:
        """Keeps the slot's conversation (its tokens and every layer's state) in the parked store, if it fits."""
        if not slot.history:
            return
        tokens = list(slot.history)
        why = self.parked.would_keep(self.store.bytes_used(slot.id))
        if why is not None:
            self.parked.drop(tokens, why)
            return
        state, nbytes = self.store.save(slot.id)
        self.parked.put(ParkedEntry(tokens, state, nbytes, slot.label))
        self._publish_parked()

    def _publish_parked(self) -> None:
        self._parked_view = tuple(
            ParkedSnapshot(e.label, len(e.tokens), e.nbytes) for e in reversed(self.parked.entries.values())
        )

    def _render(self, messages: Messages) -> list[int]:
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def _rollback(self, slot: Slot, keep: int) -> None:
        """Keeps the first `keep` cached tokens of the slot (its K/V beyond them is overwritten later)."""
        del slot.history[keep:]
        self.store.rollback(slot.id, len(slot.history))

    def _step(self) -> None:
        for s in self.slots:
            if s.request and s.request.cancelled and not self._in_flight(s):
                self._finish(s, "cancelled")
        prefilling = [s for s in self.slots if s.request and s.request.pending]
        if prefilling:
            self._guarded(self._prefill_batch(prefilling), self._prefill)
        self._decode()
        self._memory = (mx.get_active_memory(), mx.get_peak_memory())

    def _guarded(self, slots: list[Slot], fn: Callable[[list[Slot]], None]) -> None:
        """Runs a pass; if the pass itself fails, only the slots in it end with the error."""
        try:
            fn(slots)
        except Exception as exc:
            self._fail(slots, exc)

    def _fail(self, slots: list[Slot], exc: Exception) -> None:
        for s in slots:
            if s.request:
                self._rollback(s, len(s.history))
                self._finish(s, "error", _message(exc))

    def _fail_all(self, exc: Exception) -> None:
        """A step failed outside its passes: the pass in flight is dropped and every reply ends with the error."""
        self._pass = None
        self._fail([s for s in self.slots if s.request], exc)

    def _prefill_batch(self, prefilling: list[Slot]) -> list[Slot]:
        """The prefilling slots to take in one pass: round-robin, within the pass's token budget."""
        self._rr = (self._rr + 1) % len(prefilling)
        order = prefilling[self._rr :] + prefilling[: self._rr]
        width = self._chunk_width(order)
        if not self.padded_prefill:  # this model's states would take in the padding: rows of one width only
            order = [s for s in order if self._chunk_width([s]) == width]
        capacity = self.store.capacity
        fits = [s for s in order if self.store.lengths[s.id] + width <= capacity]
        return (fits or order[:1])[: max(1, PREFILL_BUDGET // width)]

    def _chunk_width(self, slots: list[Slot]) -> int:
        """Tokens per row of a prefill pass over `slots`: the longest pending prompt, up to a chunk."""
        return min(self.prefill_chunk, max(len(s.request.pending) for s in slots))  # type: ignore[union-attr]

    def _prefill(self, slots: list[Slot]) -> None:
        """One pass over the next chunk of each slot's prompt; rows are right-padded to the longest.

        A slot whose prompt ends in this chunk gets its first reply token from this pass.
        """
        requests = [s.request for s in slots]
        width = self._chunk_width(slots)
        if len(slots) == 1:
            width = min(width, self.store.capacity - self.store.lengths[slots[0].id])
        chunks = [r.pending[:width] for r in requests]  # type: ignore[union-attr]
        rows = [s.id for s in slots]
        inputs = mx.array([c + c[-1:] * (width - len(c)) for c in chunks])
        caches = self.store.batch(rows, width, [len(c) for c in chunks])
        ending = [len(c) == len(r.pending) for c, r in zip(chunks, requests)]  # type: ignore[union-attr]
        if any(ending):
            logits = self._forward.logits(inputs, caches, mx.array([len(c) - 1 for c in chunks]))
            tokens = sample_rows(logits, [r.sampler for r in requests])  # type: ignore[union-attr]
            mx.eval(tokens)
            firsts = tokens.tolist()
        else:
            # Only the K/V of middle chunks are needed: evaluating them skips the head entirely.
            self._forward.states(inputs, caches)
            mx.eval(self.store.arrays)
        self.store.commit(rows, [len(c) for c in chunks])
        for slot, r, chunk, end in zip(slots, requests, chunks, ending):
            slot.history.extend(chunk)
            del r.pending[: len(chunk)]  # type: ignore[union-attr]
            if end:
                self._take(slot, firsts[rows.index(slot.id)], next_pass=False)

    def _in_flight(self, slot: Slot) -> bool:
        return self._pass is not None and any(s is slot for s, _ in self._pass.rows)

    def _decode(self) -> None:
        """Dispatches the next decode pass for every decoding slot, then reads the previous one's tokens.

        The pass is queued (async_eval) before the previous tokens are turned into text, so the
        model computes while Python detokenizes and builds the next graph. A slot whose previous
        token turns out to end its reply wasted one row of the new pass; its write is undone.
        """
        previous = self._pass
        self._pass = None
        rows: list[tuple[Slot, Request]] = []
        inputs: list[mx.array] = []
        if previous is not None:
            for i, (s, r) in enumerate(previous.rows):
                if s.request is r and self._continues(r) and self.store.lengths[s.id] + 1 <= self.store.capacity:
                    rows.append((s, r))
                    inputs.append(previous.tokens[i])
        for s in self.slots:
            r = s.request
            if r is not None and r.next_input is not None:
                rows.append((s, r))
                inputs.append(mx.array(r.next_input))
                s.history.append(r.next_input)
                r.next_input = None
        if rows:
            # Slot order keeps neighbouring slots together, so attention reads views, not copies.
            order = sorted(range(len(rows)), key=lambda i: rows[i][0].id)
            rows, inputs = [rows[i] for i in order], [inputs[i] for i in order]
            self._guarded([s for s, _ in rows], lambda _: self._dispatch(rows, inputs))
        if previous is not None:
            self._read(previous)

    def _continues(self, r: Request) -> bool:
        """Whether a reply may go on after its next token (known limits only; EOS is seen later)."""
        return not r.cancelled and r.generated + 1 < r.sampling.max_tokens

    def _dispatch(self, rows: list[tuple[Slot, Request]], inputs: list[mx.array]) -> None:
        ids = [s.id for s, _ in rows]
        caches = self.store.batch(ids, 1)
        logits = self._forward.logits(mx.stack(inputs)[:, None], caches, None)
        tokens = sample_rows(logits, [r.sampler for _, r in rows])
        mx.async_eval(tokens)
        self.store.commit(ids, [1] * len(ids))
        self._pass = _DecodePass(rows, tokens)

    def _read(self, finished: "_DecodePass") -> None:
        """Turns a decode pass's tokens into text and decides, per slot, whether its reply goes on."""
        now = time.perf_counter()
        self._recent.append((now, len(finished.rows)))
        while now - self._recent[0][0] > RATE_WINDOW_S:
            self._recent.popleft()
        fed_next = {id(r) for _, r in self._pass.rows} if self._pass else set()
        for (s, r), token in zip(finished.rows, finished.tokens.tolist()):
            if s.request is not r:
                continue
            in_next = id(r) in fed_next
            if r.cancelled:
                self._finish(s, "cancelled")
            elif self._take(s, token, next_pass=in_next):
                continue
            if in_next:  # the new pass wrote this slot's next K/V for nothing: forget it
                self.store.undo(s.id)

    def _take(self, slot: Slot, token: int, next_pass: bool) -> bool:
        """Takes a sampled token; True if the reply goes on with it as its next input.

        `next_pass`: the token is already the slot's input in the pass in flight.
        """
        r = slot.request
        assert r is not None
        try:
            if not self._accept(slot, r, token, room=next_pass or self.store.lengths[slot.id] < self.store.capacity):
                return False
        except Exception as exc:  # one slot's failure (e.g. its event callback) ends only that slot
            self._finish(slot, "error", f"{type(exc).__name__}: {exc}")
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
            self._finish(slot, "stop")
            return False
        r.generated += 1
        r.unreported += 1
        r.detokenizer.add_token(token)
        self._emit(slot, r.detokenizer.last_segment)
        if r.generated >= r.sampling.max_tokens:
            self._finish(slot, "length")
            return False
        if not room:
            self._finish(slot, "context")
            return False
        return True

    def _emit(self, slot: Slot, text: str) -> None:
        r = slot.request
        if text and r:
            r.text.append(text)
            delta = TextDelta(r.id, slot.id, text, r.unreported)
            r.unreported = 0
            _deliver(r.handle, r.on_event, delta)

    def _finish(self, slot: Slot, reason: FinishReason, error: str | None = None) -> None:
        r = slot.request
        if r is None:
            return
        slot.request = None
        if r.pending:  # a prefill cut short leaves only the tokens that were stored
            self._rollback(slot, len(slot.history))
        tail = ""
        try:
            r.detokenizer.finalize()
            tail = r.detokenizer.last_segment
        except Exception:  # a broken detokenizer must not keep the request from ending
            pass
        if tail:
            r.text.append(tail)
            _deliver(r.handle, r.on_event, TextDelta(r.id, slot.id, tail, r.unreported), quiet=True)
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
        done = Done(r.id, slot.id, reason, "".join(r.text), stats, error)
        _deliver(r.handle, r.on_event, done, quiet=True)

    def _repartition(self, plan: SlotPlan) -> dict[int, bool]:
        if not plan.ok:
            raise ValueError("; ".join(plan.errors))
        self._settle()
        for s in self.slots:
            if s.request:
                self._finish(s, "cancelled")
        old_store, old_slots = self.store, self.slots
        store = self._new_store(plan)
        slots = [Slot(i) for i in range(plan.parallel)]
        survived: dict[int, bool] = {}
        for s in old_slots:
            n = len(s.history)
            keep = s.id < plan.parallel and 0 < n <= plan.per_slot and old_store.nbytes > 0
            survived[s.id] = keep
            if s.id < plan.parallel:
                slots[s.id].label = s.label
            if keep:
                slots[s.id].history = list(s.history)
                store.adopt(old_store, s.id)
        mx.eval(store.arrays)
        self.store, self.slots, self.plan = store, slots, plan
        self.parked.clear()  # its states have the old plan's shapes (window rings, capacity)
        self._publish_parked()
        return survived

    def _new_store(self, plan: SlotPlan) -> SlotKVStore:
        """Slot caches for `plan`, one store per layer of the kind the model's own cache has."""
        return slot_store(self.model, plan.parallel, plan.per_slot, self.per_slot_dispatch)

    def _aggregate_tok_s(self) -> float:
        now = time.perf_counter()
        recent = [(t, n) for t, n in list(self._recent) if now - t <= RATE_WINDOW_S]
        if len(recent) < 2:
            return 0.0
        return sum(n for _, n in recent[1:]) / max(recent[-1][0] - recent[0][0], 1e-9)


def _deliver(
    handle: RequestHandle, on_event: Callable[[Event], None] | None, event: Event, quiet: bool = False
) -> None:
    """Queues the event for the handle and calls the callback; `quiet` swallows callback errors."""
    handle.put(event)
    if on_event is not None:
        try:
            on_event(event)
        except Exception:
            if not quiet:
                raise


def _message(exc: Exception) -> str:
    """What a failure says to the user: MLX refusing another thread's graph gets its reason in words."""
    return STREAM_HELP if is_stream_error(exc) else f"{type(exc).__name__}: {exc}"


def _resolve(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except Exception as exc:
        future.set_exception(exc)
