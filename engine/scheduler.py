"""The slot scheduler: N slots over one model, stepped by its caller, with no thread of its own.

As mlx-lm's BatchGenerator: `admit` a request into a slot, `step` (prefill chunks, then one
batched decode pass), `cancel` or `clear` a slot. Every call must come from one thread, the one
that owns the model's MLX streams (engine.local_engine.Engine runs it on its own thread).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import mlx.core as mx
from mlx_lm.utils import common_prefix_len

from mlxchat.engine import reply_refusals as refusals
from mlxchat.engine.decode_pass import DecodePass, next_inputs
from mlxchat.engine.events import Done, EngineSnapshot
from mlxchat.engine.forward import Forward
from mlxchat.engine.requests import Submit, deliver
from mlxchat.engine.kv import attention as slot_attention
from mlxchat.engine.kv.disk import DiskTier
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.loading.lazy import failure_message
from mlxchat.engine.memory import DEFAULT_PARK_BUDGET_MB
from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.prefill.image_markers import MarkerRefused
from mlxchat.engine.prefill.pacing import STALL, StepCosts
from mlxchat.engine.prefill.policy import PromptChunks, burst, pick_prefill, prefill_budget, towers_waiting
from mlxchat.engine.prefixes import CHANGES_HANDS, Prefixes
from mlxchat.engine.rate import PassMeter
from mlxchat.engine.reply_stream import ReplyStream
from mlxchat.engine.sampling import SlotSampler, sample_rows
from mlxchat.engine.slots import Request, Slot
from mlxchat.engine.speculation.drafter import DraftModel, Drafter
from mlxchat.engine.speculation.verify import Verifier
from mlxchat.engine.status import EngineInfo, engine_snapshot
from mlxchat.engine.prefill.images import NoImages, request_prompt

if TYPE_CHECKING:
    from mlxchat.engine.loading.batch_check import SlotReady


class SlotScheduler:
    """N slots over one model: admits requests, steps every slot with work, delivers their events."""

    def __init__(
        self,
        ready: SlotReady,
        plan: SlotPlan,
        *,
        info: EngineInfo = EngineInfo(),
        prefill_chunk: int = 256,
        split: bool | None = None,
        park_budget_bytes: int = DEFAULT_PARK_BUDGET_MB * 2**20,
        disk: DiskTier | None = None,
        prefill_stall: float = STALL,
        draft: DraftModel | None = None,
    ) -> None:
        """`split`: how the CPU llama path runs its matmuls (engine.forward.Forward; None: its default).
        `ready`: the model and tokenizer, checked for the slots on the thread that built them (load_model does it;
        engine.loading.batch_check.ready_for_slots). `disk`: the saved-KV tier, if any.
        `prefill_stall`: how many times their usual step streaming slots may take while a prompt is read.
        `draft`: the draft model that drafts for replies with speculative = "draft", if any."""
        if not plan.ok:
            raise ValueError("; ".join(plan.errors))
        self.model = model = ready.model
        self.tokenizer = tokenizer = ready.tokenizer
        self.info = info
        self.prefill_chunk = prefill_chunk
        self.plan = plan
        self.padded_prefill = ready.padded_prefill  # whether prompts of different lengths may share a prefill pass
        self.per_slot_dispatch = slot_attention.install(model)
        self.forward = Forward(model, split)
        self._pass: DecodePass | None = None
        self.slots = [Slot(i) for i in range(plan.parallel)]
        self.store = SlotKVStore.for_model(model, plan.parallel, plan.per_slot, self.per_slot_dispatch, plan.kv_type)
        self.replies = ReplyStream(tokenizer, lambda: self.store)
        self.prefixes = Prefixes(park_budget_bytes, disk)
        self.rate = PassMeter()
        self.costs = StepCosts(prefill_stall)
        self.verifier = Verifier(self.forward, self.replies, lambda: self.store, self.rate, draft and Drafter(draft))
        # Prompt tokens one pass reads when nothing streams (engine.prefill.policy).
        self.prefill_budget = prefill_budget()
        self._rr = 0
        self._memory = (0, 0)

    # ---- requests and slots ----

    @property
    def busy(self) -> bool:
        """Whether a step has work: a request in some slot, or a decode pass still to read."""
        return self._pass is not None or any(s.request for s in self.slots)

    def admit(self, submit: Submit) -> None:
        """Seats a request in its slot (`handle.slot_id`), reusing what the slot or a parked prefix holds;
        a request that cannot start ends at once with a refused Done, and one that fails with an error Done."""
        handle = submit.handle
        try:
            self._admit(submit)
        except Exception as exc:  # the slot starts over: its cache may be half-moved
            failed = Done(handle.request_id, handle.slot_id, "error", "", error=failure_message(exc))
            deliver(handle, submit.on_event, failed)
            slot = self._slot(handle.slot_id)
            if slot is not None and slot.request is None:
                slot.rollback(self.store, 0)

    def cancel(self, slot_id: int) -> None:
        """Stops the slot's reply at the next step; what was written is kept and marked cancelled."""
        slot = self._slot(slot_id)
        if slot and slot.request:
            slot.request.cancelled = True

    def clear(self, slot_id: int, park: bool = True) -> None:
        """Empties the slot (its reply ends as cancelled); with `park` its conversation is parked first."""
        slot = self._slot(slot_id)
        if slot:
            if slot.request:
                self.replies.finish(slot, "cancelled")
            if park:
                self.prefixes.park(slot, self.store)
            slot.rollback(self.store, 0)

    def bind(self, slot_id: int, label: str | None) -> None:
        """Names what the slot serves (a chat's title), for the snapshot."""
        slot = self._slot(slot_id)
        if slot:
            slot.label = label

    def repartition(self, plan: SlotPlan) -> dict[int, bool]:
        """Rebuilds the slots for `plan` (replies end as cancelled); {old slot id: whether its cached KV survived}."""
        if not plan.ok:
            raise ValueError("; ".join(plan.errors))
        self.settle()
        for s in self.slots:
            if s.request:
                self.replies.finish(s, "cancelled")
        old_store, old_slots, store = self.store, self.slots, self._new_store(plan)
        slots = [Slot(i) for i in range(plan.parallel)]
        survived = {s.id: s.id < plan.parallel and 0 < len(s.history) <= plan.per_slot and old_store.nbytes > 0
                    for s in old_slots}
        for s in old_slots[: plan.parallel]:
            slots[s.id].label = s.label
            slots[s.id].history = list(s.history) if survived[s.id] else []
        self.store, self.slots = store, slots  # (what snapshots read meanwhile: the old store goes a layer at a time)
        try:
            store.take_from(old_store, [slot for slot, kept in survived.items() if kept])
        except Exception:  # (the old store is spent: its slots stay, empty, and their chats prefill again)
            self.slots = [Slot(s.id, label=s.label) for s in old_slots]  # (first: no history without its K/V)
            self.store = self._new_store(self.plan)
            raise
        finally:
            self.prefixes.clear()  # its states have the old plan's shapes (window rings, capacity)
        self.plan = plan
        return survived

    def settle(self) -> None:
        """Reads the decode pass in flight, if any, so that slots and K/V are consistent again."""
        if self._pass is not None:
            finished, self._pass = self._pass, None
            self._read(finished)

    def close(self) -> None:
        """Settles the pass in flight, ends every reply as cancelled, and saves every slot's KV to disk."""
        self.settle()
        for s in self.slots:
            if s.request:
                self.replies.finish(s, "cancelled")
        self.prefixes.save_all(self.slots, self.store)

    # ---- a step ----

    def step(self) -> None:
        """Reads prompt chunks and decodes every decoding slot; a failure ends only the replies it hit.

        While slots stream, a prompt is read in chunks paced by measured step costs, so that their step takes on
        average at most `prefill_stall` times its usual time; where the model allows, their tokens and the chunk share
        one pass (one read of the weights)."""
        started = time.perf_counter()
        try:
            for s in self.slots:
                if s.request and s.request.cancelled and not self._in_flight(s):
                    self.replies.finish(s, "cancelled")
            prefilling = [s for s in self.slots if s.request and s.request.pending]
            reading_burst = burst(self.slots, self.prefill_budget)  # (its first tokens wait for the rest of it)
            streaming = not reading_burst and any(s.request and not s.request.pending for s in self.slots)
            read = 0
            chunk = self.costs.chunk(self.prefill_chunk)
            waiting = towers_waiting(prefilling, chunk) if streaming else []
            if waiting and self.costs.tower_due():  # a slice of its vision tower, timed apart from the streams' step
                self._guarded(waiting[:1], lambda slots: slots[0].request.images.read_slice(self.costs.slice_s()))
                self.costs.tower_ran(time.perf_counter() - started)
                started = time.perf_counter()
            # (no chunk: the streams are owed steps of their own, engine.prefill.pacing)
            prefilling = [s for s in prefilling if s not in waiting] if chunk or not streaming else []
            if prefilling and streaming:
                batch = self._prefill_batch(prefilling, chunk, chunk)
                if self.forward.mixes:
                    if not any(len(s.request.pending) <= chunk for s in batch):  # type: ignore[union-attr]
                        # No prompt ends in this chunk: it rides the pipelined decode pass.
                        rows, read = self._decode((batch, chunk))
                        self._record(started, read, rows)
                        return
                    # A prompt ends: its first token is sampled in a pass of its own.
                    read, rows = self._guarded(batch, lambda slots: self._mixed(slots, chunk)) or (0, 0)
                    self._record(started, read, rows)
                    if not any(s.request and s.request.pending for s in self.slots):
                        self._decode()  # the prompts are read: the pipelined decode passes start now
                    return
                read = self._guarded(batch, lambda slots: self._prefill(slots, chunk)) or 0
            elif prefilling:
                batch = self._prefill_batch(prefilling, self.prefill_chunk, self.prefill_budget)
                read = self._guarded(batch, lambda slots: self._prefill(slots, self.prefill_chunk)) or 0
            burst_left = reading_burst and any(s.request and s.request.pending for s in self.slots)
            rows = 0 if burst_left else self._checked() if self.verifier.wanted(self.slots) else self._decode()[0]
            self._record(started, read, rows)
        except Exception as exc:
            self.fail_all(exc)

    def _record(self, started: float, read: int, rows: int) -> None:
        self.costs.record(time.perf_counter() - started, read, rows)
        self._memory = (mx.get_active_memory(), mx.get_peak_memory())

    def fail_all(self, exc: Exception) -> None:
        """A failure outside a pass: the pass in flight is dropped and every reply ends with the error."""
        self._pass = None
        self._fail([s for s in self.slots if s.request], exc)

    def _guarded(self, slots: list[Slot], fn: Callable[[list[Slot]], Any]) -> Any:
        """Runs a pass and returns what it returns; if the pass itself fails, only the slots in it end
        with the error (and it returns None)."""
        try:
            return fn(slots)
        except Exception as exc:
            self._fail(slots, exc)
            return None

    def _fail(self, slots: list[Slot], exc: Exception) -> None:
        for s in slots:
            if s.request:
                s.rollback(self.store, len(s.history))
                self.replies.finish(s, "error", failure_message(exc))

    # ---- admission ----

    def _slot(self, slot_id: int) -> Slot | None:
        return self.slots[slot_id] if 0 <= slot_id < len(self.slots) else None

    def _admit(self, submit: Submit) -> None:
        handle, sampling, on_event = submit.handle, submit.sampling, submit.on_event
        slot = self._slot(handle.slot_id)

        def refuse(message: str) -> None:
            deliver(handle, on_event, Done(handle.request_id, handle.slot_id, "error", "", error=message, refused=True))

        if slot is None:
            return refuse(refusals.no_such_slot(handle.slot_id, len(self.slots)))
        if slot.request is not None:
            return refuse(refusals.still_answering(slot.id))
        try:
            prompt, images = request_prompt(getattr(self.model, "vision_parts", None), self.tokenizer, submit)
        except Exception as exc:  # a template (or an image) that the chat cannot take is this request's problem only
            return refuse(str(exc) if isinstance(exc, (NoImages, MarkerRefused)) else refusals.unrenderable(exc))
        capacity = self.store.capacity
        if len(prompt) + 1 > capacity:
            return refuse(refusals.does_not_fit(len(prompt), slot.id, capacity, self.plan, submit.messages))
        if not prompt:
            return refuse(refusals.EMPTY)
        # At least one prompt token must go through the model to give the first reply's logits.
        limit = len(prompt) - 1
        common = min(common_prefix_len(slot.history, prompt), limit)
        # A window or recurrent layer may not go back that far: then the slot starts over.
        exact = self.store.exact_prefix(slot.id, common)
        restored_from = self.prefixes.restore(slot, self.slots, self.store, prompt, limit, exact)
        if restored_from is None:
            if exact < CHANGES_HANDS * len(slot.history):
                self.prefixes.park(slot, self.store)
            slot.rollback(self.store, exact)
        cached = len(slot.history)
        slot.request = Request(
            id=handle.request_id, handle=handle, prompt=prompt,
            sampling=sampling, sampler=SlotSampler(sampling),
            detokenizer=self.tokenizer.detokenizer,
            on_event=on_event,
            split=self.replies.split(prompt, sampling, submit.callable_tools),
            tools=submit.callable_tools,
            cached=cached,
            refilled=max(0, common - cached),
            pending=prompt[cached:],
            restored_from=restored_from,
            lost=self.prefixes.parked.why_lost(prompt, cached), images=images,
        )

    # ---- prefill ----

    def _prefill_batch(self, prefilling: list[Slot], chunk: int, budget: int) -> list[Slot]:
        """The prefilling slots to take in one pass (engine.prefill.policy), in turn from pass to pass."""
        self._rr = (self._rr + 1) % len(prefilling)
        order = prefilling[self._rr :] + prefilling[: self._rr]
        return pick_prefill(order, self.store, chunk, self.padded_prefill, budget)

    def _prefill(self, slots: list[Slot], chunk: int) -> int:
        """One pass over the next chunk (up to `chunk` tokens) of each slot's prompt; rows are right-padded
        to the longest. A slot whose prompt ends in this chunk gets its first reply token from this pass.
        Returns the prompt tokens read."""
        part = PromptChunks(slots, chunk, self.store)
        if part.positions is not None:
            firsts = part.sample(self.forward.logits(part.inputs, part.caches, part.positions, part.embeds))
            mx.eval(firsts)
            return self._advance(part, firsts.tolist())
        # Only the K/V of middle chunks are needed: evaluating them skips the head entirely.
        self.forward.states(part.inputs, part.caches, part.embeds)
        mx.eval(self.store.arrays)
        return self._advance(part, [])

    def _advance(self, part: "PromptChunks", firsts: list[int]) -> int:
        """Records a pass over `part`'s chunks: the slots' histories grow, and prompts that ended take
        their first reply token (`firsts`, one per ending row in order)."""
        self.store.commit(part.rows, [len(c) for c in part.chunks])
        ending = iter(firsts)
        for slot, chunk, end in zip(part.slots, part.chunks, part.ending):
            r = slot.request
            slot.history.extend(chunk)
            del r.pending[: len(chunk)]  # type: ignore[union-attr]
            if end:
                self.replies.take(slot, next(ending), next_pass=False)
        return sum(len(c) for c in part.chunks)

    def _mixed(self, slots: list[Slot], chunk: int) -> tuple[int, int]:
        """One pass over every decoding slot's next token and the next chunk of `slots`' prompts, sharing
        each matmul; returns (prompt tokens read, slots decoded). Synchronous: the next pass waits for it."""
        self.settle()
        decoding = [s for s in self.slots if s.request and s.request.next_input is not None]
        if not decoding:
            return self._prefill(slots, chunk), 0
        ids = [s.id for s in decoding]
        inputs = mx.array([[s.request.next_input] for s in decoding])  # type: ignore[union-attr]
        for s in decoding:
            s.history.append(s.request.next_input)  # type: ignore[union-attr, arg-type]
            s.request.next_input = None  # type: ignore[union-attr]
        caches = self.store.batch(ids, 1)
        part = PromptChunks(slots, chunk, self.store)
        decode_logits, chunk_logits = self.forward.mixed_logits((inputs, caches), (part.inputs, part.caches),
                                                                part.positions)
        tokens = sample_rows(decode_logits, [s.request.sampler for s in decoding])  # type: ignore[union-attr]
        firsts = part.sample(chunk_logits) if chunk_logits is not None else None
        mx.eval(tokens, firsts, self.store.arrays)
        self.store.commit(ids, [1] * len(ids))
        self.rate.passed(len(decoding))
        for s, token in zip(decoding, tokens.tolist()):
            if s.request is not None:
                if s.request.cancelled:
                    self.replies.finish(s, "cancelled")
                else:
                    self.replies.take(s, token, next_pass=False)
        return self._advance(part, firsts.tolist() if firsts is not None else []), len(decoding)

    # ---- decode ----

    def _in_flight(self, slot: Slot) -> bool:
        return self._pass is not None and any(s is slot for s, _ in self._pass.rows)

    def _decode(self, prompts: tuple[list[Slot], int] | None = None) -> tuple[int, int]:
        """Dispatches the next decode pass for every decoding slot, then reads the previous one's tokens;
        returns (slots decoded, prompt tokens read).

        The pass is queued (async_eval) before the previous tokens are turned into text, so the
        model computes while Python detokenizes and builds the next graph. A slot whose previous
        token turns out to end its reply wasted one row of the new pass; its write is undone.
        `prompts` (slots, chunk): the next chunk of these prompts, none of which ends in it, shares the
        pass (one read of the weights; their K/V only).
        """
        previous = self._pass
        self._pass = None
        rows: list[tuple[Slot, Request]] = []
        inputs: list[int] = []  # a row's input: i for the previous pass's i-th token, else -1 - the token
        if previous is not None:
            for i, (s, r) in enumerate(previous.rows):
                if s.request is r and r.continues() and self.store.lengths[s.id] + 1 <= self.store.capacity:
                    rows.append((s, r))  # (a reply whose reasoning ends at its budget is fed its end marker)
                    inputs.append(-1 - r.forced[0] if r.forced else i)
        for s in self.slots:
            r = s.request
            if r is not None and r.next_input is not None:
                rows.append((s, r))
                inputs.append(-1 - r.next_input)
                s.history.append(r.next_input)
                r.next_input = None
        read = 0
        if rows:
            # Slot order keeps neighbouring slots together, so attention reads views, not copies.
            order = sorted(range(len(rows)), key=lambda i: rows[i][0].id)
            rows, inputs = [rows[i] for i in order], [inputs[i] for i in order]
            in_pass = [s for s, _ in rows] + (prompts[0] if prompts else [])
            fed = next_inputs(inputs, previous)
            read = self._guarded(in_pass, lambda _: self._dispatch(rows, fed, prompts)) or 0
        if previous is not None:
            self._read(previous)
        return len(rows), read

    def _checked(self) -> int:
        """Reads the pass in flight, then checks drafts in a pass of every decoding slot (engine.speculation)."""
        self.settle()
        return self._guarded([s for s in self.slots if s.request], self.verifier.check) or 0

    def _dispatch(
        self, rows: list[tuple[Slot, Request]], inputs: mx.array, prompts: tuple[list[Slot], int] | None
    ) -> int:
        """Queues a decode pass over `rows` (with the next chunk of `prompts`, if given); returns the prompt
        tokens it reads."""
        ids = [s.id for s, _ in rows]
        caches = self.store.batch(ids, 1)
        decode = (inputs[:, None], caches)
        part = PromptChunks(*prompts, self.store) if prompts else None
        if part is None:
            logits = self.forward.logits(*decode, None)
        else:
            logits, _ = self.forward.mixed_logits(decode, (part.inputs, part.caches), None)
        tokens = sample_rows(logits, [r.sampler for _, r in rows])
        mx.async_eval(tokens, *(self.store.arrays if part is not None else ()))  # the chunk's K/V too
        self.store.commit(ids, [1] * len(ids))
        self._pass = DecodePass(rows, tokens)
        return self._advance(part, []) if part is not None else 0

    def _read(self, finished: DecodePass) -> None:
        """Turns a decode pass's tokens into text and decides, per slot, whether its reply goes on."""
        self.rate.passed(len(finished.rows))
        fed_next = {id(r) for _, r in self._pass.rows} if self._pass else set()
        for (s, r), token in zip(finished.rows, finished.tokens.tolist()):
            if s.request is not r:
                continue
            in_next = id(r) in fed_next
            if r.cancelled:
                self.replies.finish(s, "cancelled")
            elif self.replies.take(s, token, next_pass=in_next):
                continue
            if in_next:  # the new pass wrote this slot's next K/V for nothing: forget it
                self.store.undo(s.id)

    def _new_store(self, plan: SlotPlan) -> SlotKVStore:
        """Slot caches for `plan`, one store per layer of the kind the model's own cache has, K/V as it says."""
        return SlotKVStore.for_model(self.model, plan.parallel, plan.per_slot, self.per_slot_dispatch, plan.kv_type)

    # ---- the report ----

    def snapshot(self) -> EngineSnapshot:
        """Every slot's state and the engine-wide figures, as of the last step (safe from any thread)."""
        return engine_snapshot(self.slots, self.store, self.info, self._memory, self.rate, self.prefixes,
                               self.rate.widest, self.verifier.note)
