"""The session: the one owner of the engine, its slot plan and the seating of chats on slots.

Screens and panes ask it for engine work (send, stop, clear, snapshot, re-partition); it answers
through Textual messages (mlxchat.app.session.messages). Its state lives on the UI thread: what
the engine reports from its own thread comes back through the app's message queue first.

Slots are lent, not owned: chats are unlimited, and with no more chats than slots each keeps its
own. A chat without a slot that sends takes a free slot, else the least recently used idle one
(whose chat is parked); with every slot generating, its message waits in the session's queue.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from textual.message_pump import MessagePump

from mlxchat.app.config.settings import Settings
from mlxchat.app.exit_codes import EXIT_FAILURE
from mlxchat.app.session.tools import ToolsAndCounts
from mlxchat.app.session.feed import ReplyFeed
from mlxchat.app.session.messages import ChatSeated, PlanChanged, PlanRefused, Queued, ReplyDone, Withdrawn
from mlxchat.app.session.seating import assign_slots
from mlxchat.app.session.model_choice import remember
from mlxchat.app.session.start import DOCTOR_REMEDY, StartFailure, start_engine
from mlxchat.app.tools.listing import Listing
from mlxchat.engine import (
    Done,
    EngineSnapshot,
    Event,
    Messages,
    ModelFacts,
    Progress,
    SamplingParams,
    SlotPlan,
    SlotRequest,
    StartedEngine,
    TextDelta,
    on_own_thread,
    retire,
)

if TYPE_CHECKING:
    from mlxchat.engine import ChatEngine


@dataclass(frozen=True)
class Pending:
    """A request that has not reached the engine yet (it waits in the queue)."""

    request: int
    messages: Messages
    sampling: SamplingParams
    feed: ReplyFeed
    tools: list[dict] | None = None  # what the reply may call (function schemas), as the template lists them
    unlisted_tools: list[dict] | None = None  # and besides, defined in the conversation (found by a search)


@dataclass
class Seat:
    """An open chat as the session knows it: its name, who hears about it, and its slot."""

    key: str
    title: str
    target: MessagePump  # where the chat's messages go (the widget that opened it)
    slot: int | None = None
    request: int | None = None  # the reply being written for it, or waiting in the queue
    pending: Pending | None = None  # that request while it waits
    used: int = 0  # when its slot was last used (a tick of the session's clock): the LRU order
    place: int | None = None  # its place in the queue, as the chat was last told


class Session:
    """The engine, the slot plan, the model's facts and which chat sits on which slot; its `tools` (the MCP servers,
    and what a chat takes of its slot) read the model running now through it."""

    def __init__(self, app: MessagePump) -> None:
        self._app = app  # where session-wide messages go, and whose queue brings engine news to the UI thread
        self.engine: ChatEngine | None = None  # the local Engine, or a RemoteEngine over a server
        self.plan: SlotPlan | None = None
        self.facts: ModelFacts | None = None
        self.model_name = ""
        self.thinking_switch = False  # whether the model's chat template can turn its thinking off
        self.keep_reasoning = False  # whether later turns send the replies' reasoning back (the setting)
        self.takes_tools = False  # whether the model's replies may call tools
        self.sees = False  # whether the model takes images (a vision model through mlx-vlm, or a server's that may)
        self.why_no_images = ""  # why not, where the engine said more than "a text model"
        self.draft_model: str | None = None  # the draft model loaded beside it, for chats with speculative = "draft"
        self.tools = ToolsAndCounts(self)  # the MCP servers, and what a chat takes of its slot
        # Chat key: the tool call it waits on, and for whom ("weather: your approval"), for the inspector.
        self.tool_waits: dict[str, str] = {}
        self._seats: dict[str, Seat] = {}  # in the order the chats were opened
        self._queue: list[str] = []  # the chats waiting for a slot, first in line first
        self._requests = itertools.count(1)
        self._clock = itertools.count(1)
        self._repartitioning = False  # no request starts while the slots are rebuilt

    # ---- start and stop ----

    @staticmethod
    def load_in_background(settings: Settings, progress: Callable[[Progress], None]) -> Future[StartedEngine]:
        """An engine started on `settings` on a thread of its own, not yet the session's (`start` or `switch` makes
        it so). The future raises StartFailure with what to change, an unexpected error in words too; a model that
        ran is remembered for the picker. `progress` hears each step, on that thread."""
        return on_own_thread(partial(_load, settings, progress), "mlxchat-load")

    def start(self, started: StartedEngine, settings: Settings) -> tuple[str, ...]:
        """Makes `started`, the first engine, the session's; returns its start-up warnings."""
        self.keep_reasoning = settings.keep_reasoning
        self._install(started)
        return started.warnings

    def _install(self, started: StartedEngine) -> None:
        self.engine, self.plan = started.engine, started.plan
        self.model_name, self.facts = started.model_name, started.facts
        self.thinking_switch, self.takes_tools = started.thinking_switch, started.takes_tools
        self.tools.model_changed()
        self.sees, self.why_no_images = started.sees, started.why_no_images
        self.draft_model = started.draft_model

    def switch(self, started: StartedEngine) -> list[str]:
        """Puts `started` (another model's engine) in the place of the running one, whose memory goes back: replies
        being written stop (their chats hear so, as for escape); the chats keep their slots where the new plan has
        them, with no KV (each next turn reads its conversation again). Returns the titles of the stopped chats."""
        old, stopped = self.engine, self.busy_titles()
        self._install(started)
        if old is not None:
            retire(old)
        self._reseat(None)
        for seat in self._seats.values():  # (the new engine's slots named after their chats)
            self._bind(seat)
        self._serve_queue()
        self._app.post_message(PlanChanged(started.plan))
        return stopped

    @property
    def ready(self) -> bool:
        """Whether the engine runs."""
        return self.engine is not None

    def shutdown(self) -> None:
        """Stops the engine thread (idempotent); replies still running end as cancelled."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()
        self.tools.close()

    # ---- seating ----

    def _free_slot(self) -> int | None:
        taken = {seat.slot for seat in self._seats.values()}
        parallel = self.plan.parallel if self.plan is not None else 0
        return next((slot for slot in range(parallel) if slot not in taken), None)

    def open_chat(self, key: str, title: str, target: MessagePump) -> int | None:
        """Seats a new chat on the lowest free slot and names the slot after it; with none free the chat
        opens all the same (None) and borrows a slot when it sends."""
        seat = self._seats[key] = Seat(key, title, target, self._free_slot())
        self._bind(seat)
        return seat.slot

    def close_chat(self, key: str) -> None:
        """Forgets the chat (its reply, if any, is stopped, its queued message dropped) and gives its slot
        to the first chat in the queue, else to a chat that has none."""
        seat = self._seats.pop(key, None)
        if key in self._queue:  # first: with no engine (shut down, or not started) it waits there too
            self._queue.remove(key)
        if seat is None or self.engine is None:
            return
        if seat.slot is not None:
            self.engine.clear(seat.slot)
            self.engine.bind(seat.slot, None)
        self._serve_queue()
        self._reseat(None)

    def rename(self, key: str, title: str) -> None:
        """Names the chat's slot after its new title."""
        seat = self._seats.get(key)
        if seat is not None:
            seat.title = title
            self._bind(seat)

    def slot_of(self, key: str) -> int | None:
        """The slot chat `key` sits on, or None."""
        seat = self._seats.get(key)
        return seat.slot if seat is not None else None

    def chat_on(self, slot: int) -> str | None:
        """The key of the chat on `slot`, or None."""
        return next((seat.key for seat in self._seats.values() if seat.slot == slot), None)

    def losing_seats(self, plan: SlotPlan) -> list[str]:
        """The titles of the chats that would have no slot under `plan`."""
        seats = list(self._seats.values())
        after = assign_slots([seat.slot for seat in seats], plan.parallel)
        return [seat.title for seat, slot in zip(seats, after) if slot is None and seat.slot is not None]

    def outgrown(self, per_slot: int) -> list[tuple[str, int]]:
        """(title, tokens) of each chat whose slot holds at least `per_slot` tokens: a slot of that size could not
        take its next message."""
        assert self.engine is not None
        slots = self.engine.snapshot().slots
        return [(seat.title, slots[seat.slot].used) for seat in self._seats.values()
                if seat.slot is not None and seat.slot < len(slots) and slots[seat.slot].used >= per_slot]

    def busy_titles(self) -> list[str]:
        """The titles of the chats whose reply is being written (not those waiting in the queue)."""
        return [seat.title for seat in self._seats.values() if seat.request is not None and seat.pending is None]

    def writing(self) -> bool:
        """Whether the engine is writing any chat's reply now."""
        return bool(self.busy_titles())

    def place_of(self, key: str) -> int | None:
        """Chat `key`'s place in the queue (1 is next), or None when it does not wait."""
        return self._queue.index(key) + 1 if key in self._queue else None

    def queue_titles(self) -> list[str]:
        """The titles of the chats waiting for a slot, first in line first."""
        return [self._seats[key].title for key in self._queue]

    @property
    def open_count(self) -> int:
        """How many chats are open."""
        return len(self._seats)

    def _bind(self, seat: Seat) -> None:
        if self.engine is not None and seat.slot is not None:
            self.engine.bind(seat.slot, seat.title)

    def _reseat(self, survived: Mapping[int, bool] | None) -> None:
        """Seats the chats on the plan's slots: each keeps its slot while it exists, chats without one
        take free slots in the order they were opened. `survived` (after a re-partition) says whose
        KV the engine kept, and every chat is told; without it only the chats that move are."""
        assert self.plan is not None
        seats = list(self._seats.values())
        for seat, slot in zip(seats, assign_slots([seat.slot for seat in seats], self.plan.parallel)):
            if survived is None and slot == seat.slot:
                continue
            before, seat.slot = seat.slot, slot
            kept = slot is not None and slot == before and bool(survived and survived.get(slot))
            seat.target.post_message(ChatSeated(seat.key, slot, before, kept))
            self._bind(seat)

    # ---- replies ----

    def submit(self, key: str, messages: Messages, sampling: SamplingParams, feed: ReplyFeed,
               listing: Listing | None = None) -> int:
        """Asks for chat `key`'s reply to `messages`: at once on its own slot, a free one or the least
        recently used idle one; with every slot generating it waits in line (Queued tells the chat its
        place). Its text goes into `feed`, its end comes as ReplyDone to the chat's target; `listing`: the tools
        it may call. Returns the request's id, as the messages give it back."""
        seat = self._seats[key]
        request = seat.request = next(self._requests)
        tools = (listing.schemas(listing.listed), listing.schemas(listing.unlisted)) if listing else (None, None)
        seat.pending = Pending(request, messages, sampling, feed, *tools)
        self._queue.append(key)
        self._serve_queue()
        return request

    def _serve_queue(self) -> None:
        """Starts the waiting requests, first in line first, while a slot can be had; tells the others
        their place."""
        while self._queue and self.engine is not None and not self._repartitioning:
            seat = self._seats[self._queue[0]]
            slot = seat.slot if seat.slot is not None else self._lend()
            if slot is None:  # every slot is generating
                break
            self._queue.pop(0)
            if seat.slot != slot:
                seat.slot = slot
                self._bind(seat)
                seat.target.post_message(ChatSeated(seat.key, slot, None, False, lent=True))
            self._start(seat)
        for place, key in enumerate(self._queue, 1):
            seat = self._seats[key]
            if seat.place != place and seat.request is not None:
                seat.place = place
                seat.target.post_message(Queued(key, seat.request, place))

    def _lend(self) -> int | None:
        """A slot for a chat that has none: a free one, else the least recently used idle one, whose
        chat is parked; None while every slot is generating."""
        free = self._free_slot()
        if free is not None:
            return free
        idle = [seat for seat in self._seats.values() if seat.slot is not None and seat.request is None]
        if not idle:
            return None
        return self._park(min(idle, key=lambda seat: seat.used))

    def _park(self, seat: Seat) -> int:
        """Takes its slot from an idle chat and returns it. The engine keeps the slot's KV in its parked
        store (within park_budget_mb), so the chat's next turn prefills only its new tokens."""
        slot, seat.slot = seat.slot, None
        assert slot is not None and self.engine is not None
        self.engine.clear(slot)  # before the slot is named after its next chat: the parked KV keeps this one's name
        seat.target.post_message(ChatSeated(seat.key, None, slot, False, lent=True))
        return slot

    def _start(self, seat: Seat) -> None:
        """Hands the chat's waiting request to the engine, on the chat's slot."""
        pending, seat.pending, seat.place = seat.pending, None, None
        assert self.engine is not None and seat.slot is not None and pending is not None
        seat.used = next(self._clock)
        on_event = self._on_event(seat.key, pending.request, pending.feed)
        self.engine.submit(seat.slot, pending.messages, sampling=pending.sampling, on_event=on_event,
                           tools=pending.tools, unlisted_tools=pending.unlisted_tools)

    def _on_event(self, key: str, request: int, feed: ReplyFeed) -> Callable[[Event], None]:
        """The engine callback of one reply (run on the engine thread): text into the feed, the end
        back to the UI thread."""

        def on_event(event: Event) -> None:
            if isinstance(event, TextDelta):
                feed.put(event.part, event.text, event.tokens)
            else:
                self._app.call_later(self._ended, key, request, event)

        return on_event

    def _ended(self, key: str, request: int, done: Done) -> None:
        seat = self._seats.get(key)
        if seat is not None and seat.request == request:  # (not closed, and still the reply it waits for)
            seat.request = None
            seat.used = next(self._clock)
            seat.target.post_message(ReplyDone(key, request, done))
        self._serve_queue()  # a slot is idle again

    def stop(self, key: str) -> bool:
        """Stops chat `key`'s reply (the engine keeps what was written), or takes its message out of the
        queue (Withdrawn tells the chat); False when there is neither."""
        seat = self._seats.get(key)
        if seat is None or seat.request is None or self.engine is None:
            return False
        if key in self._queue:
            self._queue.remove(key)
            request, seat.request, seat.pending, seat.place = seat.request, None, None, None
            seat.target.post_message(Withdrawn(key, request))
            self._serve_queue()  # the others move up
            return True
        if seat.slot is None:
            return False
        self.engine.cancel(seat.slot)
        return True

    # ---- slots ----

    def snapshot(self) -> EngineSnapshot:
        """Every slot's state and the engine-wide figures; a slot whose chat waits on a tool call is in state
        "tool", its chat named with what it waits on."""
        assert self.engine is not None
        snapshot = self.engine.snapshot()
        waiting = {seat.slot: wait for key, wait in self.tool_waits.items()
                   if (seat := self._seats.get(key)) is not None and seat.slot is not None}
        if not waiting:
            return snapshot
        slots = tuple(replace(s, state="tool", label=f"{s.label or ''} · {waiting[s.id]}")
                      if s.id in waiting and s.state == "idle" else s for s in snapshot.slots)
        return replace(snapshot, slots=slots)

    def cancel_slot(self, slot: int) -> None:
        """Stops the reply on `slot`, whichever chat it serves."""
        if self.engine is not None:
            self.engine.cancel(slot)

    def clear_slot(self, slot: int) -> None:
        """Forgets the KV cached on `slot` (its chat's next turn prefills the whole conversation)."""
        if self.engine is not None:
            self.engine.clear(slot)

    def evaluate(self, request: SlotRequest) -> SlotPlan:
        """The engine's evaluation of `request` for the loaded model (nothing is applied)."""
        assert self.facts is not None
        return self.facts.evaluate(request)

    def apply_plan(self, plan: SlotPlan, reply_to: MessagePump) -> None:
        """Re-partitions the engine to `plan` (replies in progress stop) and re-seats the chats.

        The outcome comes as a message: PlanChanged to the app and to `reply_to`, or PlanRefused to
        `reply_to` (the engine then keeps its slots).
        """
        assert self.engine is not None
        self._repartitioning = True

        def landed(future: Future[dict[int, bool]]) -> None:  # on the engine thread
            try:
                survived = future.result()
            except Exception as exc:  # e.g. no memory for the new KV cache
                self._app.call_later(self._refused, f"{type(exc).__name__}: {exc}", reply_to)
                return
            self._app.call_later(self._adopt, plan, survived, reply_to)

        self.engine.repartition(plan).add_done_callback(landed)

    def _refused(self, error: str, reply_to: MessagePump) -> None:
        self._repartitioning = False
        self._serve_queue()
        reply_to.post_message(PlanRefused(error))

    def _adopt(self, plan: SlotPlan, survived: Mapping[int, bool], reply_to: MessagePump) -> None:
        self.plan, self._repartitioning = plan, False
        self._reseat(survived)
        self._serve_queue()
        self._app.post_message(PlanChanged(plan))
        if reply_to is not self._app:
            reply_to.post_message(PlanChanged(plan))


def _load(settings: Settings, progress: Callable[[Progress], None]) -> StartedEngine:
    try:
        if settings.engine == "remote":  # nothing of MLX is imported for a server
            from mlxchat.app.session.remote import start_remote_engine

            started = start_remote_engine(settings, progress)
        else:
            started = start_engine(settings, progress)
    except StartFailure:
        raise
    except Exception as exc:  # anything else unexpected still deserves words rather than a traceback
        raise StartFailure(f"{type(exc).__name__}: {exc}", DOCTOR_REMEDY, EXIT_FAILURE) from exc
    remember(settings.model)
    return started
