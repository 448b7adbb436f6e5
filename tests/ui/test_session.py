"""The session on its own: a bare Textual app owns it, widgets stand for chats and record what they are told.

The engine is the real one, on the tiny generated model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.message import Message
from textual.widget import Widget

from mlxchat.app.config.loading import load_settings
from mlxchat.app.session.feed import ReplyFeed
from mlxchat.app.session.messages import ChatSeated, PlanChanged, PlanRefused, Queued, ReplyDone, Withdrawn
from mlxchat.app.session.session import Session
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.plan import SlotRequest
from tests.pilot import HeldWhen

TIMEOUT_S = 60.0
GREEDY = SamplingParams(max_tokens=8)
ENDLESS = SamplingParams(max_tokens=100_000, ignore_eos=True)  # runs to the end of its slot unless stopped
HELLO = [{"role": "user", "content": "Hello"}]


class Listener(Widget):
    """Stands for a chat pane (or a screen): keeps every session message it is sent."""

    def __init__(self, name: str) -> None:
        super().__init__(id=name)
        self.heard: list[Message] = []

    @on(ChatSeated)
    @on(ReplyDone)
    @on(PlanChanged)
    @on(PlanRefused)
    @on(Queued)
    @on(Withdrawn)
    def hear(self, message: Message) -> None:
        self.heard.append(message)

    def of(self, kind: type[Message]) -> list:
        return [m for m in self.heard if isinstance(m, kind)]


class Host(App[None]):
    """An app that owns a session and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.session = Session(self)
        self.plans: list[PlanChanged] = []

    def compose(self) -> ComposeResult:
        for name in ("a", "b", "c", "d", "screen"):
            yield Listener(name)

    def on_plan_changed(self, message: PlanChanged) -> None:
        self.plans.append(message)

    def listener(self, name: str) -> Listener:
        return self.query_one(f"#{name}", Listener)


def run_session(model: Path, scenario: Callable[[Host], Awaitable[None]], **settings: object) -> None:
    """Starts the engine through the session (as the app's start-up worker does) and runs `scenario`."""
    config = load_settings(None, {"model": str(model), "parallel": 2, "ctx_size": 2048, **settings})

    async def main() -> None:
        host = Host()
        async with host.run_test():
            started = await asyncio.wrap_future(host.session.load_in_background(config, lambda _: None))
            host.session.start(started, config)
            try:
                await scenario(host)
            finally:
                host.session.shutdown()

    asyncio.run(main())


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + TIMEOUT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_chats_are_seated_on_free_slots_and_a_freed_slot_goes_to_a_chat_without_one(tiny_model_dir: Path) -> None:
    async def scenario(host: Host) -> None:
        session = host.session
        a, b, c = (host.listener(name) for name in "abc")
        assert session.open_chat("a", "Chat A", a) == 0
        assert session.open_chat("b", "Chat B", b) == 1
        assert session.open_chat("c", "Chat C", c) is None  # more chats than slots: it opens all the same
        await until(lambda: [s.label for s in session.snapshot().slots] == ["Chat A", "Chat B"], "the labels")
        session.close_chat("a")
        await until(lambda: bool(c.of(ChatSeated)), "chat C to be told")
        (seated,) = c.of(ChatSeated)
        assert (seated.key, seated.slot, seated.before, seated.kv_kept) == ("c", 0, None, False)
        assert session.slot_of("c") == 0 and session.chat_on(0) == "c" and session.chat_on(1) == "b"
        assert not b.of(ChatSeated)  # a chat that keeps its slot is not told anything
        await until(lambda: session.snapshot().slots[0].label == "Chat C", "slot 0 named after chat C")

    run_session(tiny_model_dir, scenario)


def test_a_reply_ends_by_message_and_a_new_plan_is_told_to_the_app_the_asker_and_the_chats(
    tiny_model_dir: Path,
) -> None:
    async def scenario(host: Host) -> None:
        session = host.session
        a, screen = host.listener("a"), host.listener("screen")
        session.open_chat("a", "Chat A", a)
        feed = ReplyFeed()
        request = session.submit("a", [{"role": "user", "content": "Hello"}], GREEDY, feed)
        await until(lambda: bool(a.of(ReplyDone)), "the reply's end")
        (done,) = a.of(ReplyDone)
        assert done.request == request and done.key == "a" and done.done.reason in ("stop", "length")
        assert feed.take() == [("answer", done.done.text, done.done.stats.generated_tokens)]
        used = session.snapshot().slots[0].used
        assert used > 0
        wider = session.evaluate(SlotRequest(parallel=3, ctx_size=3072))
        session.apply_plan(wider, screen)
        await until(lambda: bool(screen.of(PlanChanged)) and bool(host.plans), "the plan's news")
        assert screen.of(PlanChanged)[0].plan == host.plans[0].plan == wider == session.plan
        snapshot = session.snapshot()
        assert len(snapshot.slots) == 3 and snapshot.slots[0].used == used and snapshot.slots[0].label == "Chat A"
        await until(lambda: bool(a.of(ChatSeated)), "the chat's news")
        seated = a.of(ChatSeated)[0]
        assert (seated.slot, seated.before, seated.kv_kept) == (0, 0, True)
        # A plan the engine refuses comes back as PlanRefused; the engine keeps its slots.
        refused = session.evaluate(SlotRequest(parallel=8, ctx_size=1024))
        assert not refused.ok
        session.apply_plan(refused, screen)
        await until(lambda: bool(screen.of(PlanRefused)), "the refusal")
        assert "below the minimum" in screen.of(PlanRefused)[0].error
        assert len(session.snapshot().slots) == 3 and session.plan == wider

    run_session(tiny_model_dir, scenario)


def test_a_chat_without_a_slot_borrows_the_least_recently_used_idle_one_or_waits_in_line(tiny_model_dir: Path) -> None:
    async def scenario(host: Host) -> None:
        session = host.session
        a, b, c, d = (host.listener(name) for name in "abcd")
        for name, listener in zip("abcd", (a, b, c, d)):
            session.open_chat(name, f"Chat {name.upper()}", listener)
        session.submit("a", HELLO, GREEDY, ReplyFeed())
        await until(lambda: bool(a.of(ReplyDone)), "chat A's reply")
        # C has no slot: it borrows the idle slot used least recently, B's (A has just used its own).
        session.submit("c", HELLO, GREEDY, ReplyFeed())
        assert (session.slot_of("b"), session.slot_of("c"), session.slot_of("a")) == (None, 1, 0)
        await until(lambda: bool(c.of(ReplyDone)) and bool(b.of(ChatSeated)), "chat C's reply on B's slot")
        parked, lent = b.of(ChatSeated)[0], c.of(ChatSeated)[0]
        assert (parked.slot, parked.before, parked.lent) == (None, 1, True)
        assert (lent.slot, lent.before, lent.lent) == (1, None, True)
        # Both slots generating (held there, so that A is still writing when it is stopped): D and then B wait
        # in line, told their places.
        hold = HeldWhen(host, lambda core: all(s.request and s.request.generated >= 1 for s in core.slots))
        session.submit("a", HELLO, ENDLESS, ReplyFeed())
        session.submit("c", HELLO, ENDLESS, ReplyFeed())
        await hold.held()
        waiting_d = session.submit("d", HELLO, GREEDY, ReplyFeed())
        waiting_b = session.submit("b", HELLO, GREEDY, ReplyFeed())
        assert (session.place_of("d"), session.place_of("b")) == (1, 2)
        assert session.queue_titles() == ["Chat D", "Chat B"] and session.busy_titles() == ["Chat A", "Chat C"]
        # D is taken out of the line: B moves up.
        assert session.stop("d")
        assert session.place_of("d") is None and session.place_of("b") == 1
        await until(lambda: bool(d.of(Withdrawn)) and len(b.of(Queued)) == 2, "the line's news")
        assert d.of(Withdrawn)[0].request == waiting_d and not d.of(ReplyDone)
        assert [(q.request, q.place) for q in b.of(Queued)] == [(waiting_b, 2), (waiting_b, 1)]
        # A's reply stops: its slot is idle, and B, first in line, takes it and gets its reply.
        assert session.stop("a")
        hold.release()
        await until(lambda: any(r.request == waiting_b for r in b.of(ReplyDone)), "chat B's reply from the queue")
        assert session.slot_of("b") == 0 and session.slot_of("a") is None
        assert [r.done.reason for r in a.of(ReplyDone)][-1] == "cancelled"
        assert session.queue_titles() == []
        session.stop("c")
        await until(lambda: len(c.of(ReplyDone)) == 2, "chat C's endless reply to stop")

    run_session(tiny_model_dir, scenario)


def test_a_chat_closed_while_it_waits_without_an_engine_leaves_the_line() -> None:
    """With no engine (shut down, or still loading) a sent message waits in line; closing its chat takes it out."""

    async def main() -> None:
        host = Host()
        async with host.run_test():
            session = host.session
            session.open_chat("a", "Chat A", host.listener("a"))
            session.open_chat("b", "Chat B", host.listener("b"))
            session.submit("a", HELLO, GREEDY, ReplyFeed())
            session.submit("b", HELLO, GREEDY, ReplyFeed())
            assert session.queue_titles() == ["Chat A", "Chat B"]
            session.close_chat("a")
            assert session.queue_titles() == ["Chat B"] and session.place_of("b") == 1

    asyncio.run(main())
