"""Fan-out, fork and edit of an earlier message in the real app on the tiny model, and the badges of
background work in the chat list."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList, TabbedContent, TextArea

from mlxchat.app.chats.store import ChatStore
from mlxchat.app.session.feed import ReplyFeed
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.fan_out import FanOutScreen
from mlxchat.app.ui.screens.turn_picker import TurnPickerScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.markers import needs_cpu
from tests.pilot import hold_engine, make_app, ready, run, send, steady_cursors, submit, wait_for

PROMPT = "Write a short poem about a lighthouse"
REPLY_TOKENS = 120


def tab_label(app: ChatApp, pane: ChatPane) -> str:
    """The text of the pane's tab."""
    return str(app.query_one("#chats", TabbedContent).get_tab(pane.id or "").label)


def grid_on(app: ChatApp) -> bool:
    return app.query_one("#chats", TabbedContent).has_class("-grid")


async def fan_out(app: ChatApp, pilot: Pilot, prompt: str) -> list[ChatPane]:
    """Opens the fan-out form with F6, types `prompt`, sends it as the form is pre-filled; returns the
    variants as soon as they are open (ctrl+s through Pilot would return only once every reply ended)."""
    await pilot.press("f6")
    await wait_for(pilot, lambda: isinstance(app.screen, FanOutScreen), "the fan-out form")
    screen = app.screen
    assert isinstance(screen, FanOutScreen)
    screen.query_one("#fan-out-prompt", TextArea).text = prompt
    screen.action_confirm()
    await wait_for(pilot, lambda: len([p for p in app.chat_panes if p.fan_out]) == 3, "three variants")
    return [p for p in app.chat_panes if p.fan_out]


async def two_turns(app: ChatApp, pilot: Pilot) -> ChatPane:
    pane = await ready(app, pilot)
    for text in ("Tell me about the terminal app", "And what about the slots?"):
        await send(pilot, pane, text)
        await wait_for(pilot, lambda: not pane.busy, "a reply")
    return pane


def test_fan_out_to_three_temperatures_streams_side_by_side_and_keeps_one(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When each reply's text came (engine thread): the three streams overlap in time.
    came: dict[ReplyFeed, list[float]] = {}
    put = ReplyFeed.put
    monkeypatch.setattr(ReplyFeed, "put", lambda feed, *text: (came.setdefault(feed, []).append(time.monotonic()),
                                                               put(feed, *text))[1])

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        blank = await ready(app, pilot)
        variants = await fan_out(app, pilot, PROMPT)
        # The empty chat the fan-out started from gave way; the three variants fill the grid.
        assert blank not in app.chat_panes and app.chat_panes == variants and grid_on(app)
        assert [p.chat.sampling.temperature for p in variants] == [0.2, 0.7, 1.2]
        titles = [p.chat_title for p in variants]
        assert [t.split(" · ")[0] for t in titles] == ["T=0.2", "T=0.7", "T=1.2"]
        await wait_for(pilot, lambda: all(p.busy for p in variants), "three requests")
        feeds = [p._feed for p in variants]
        generating = 0

        def all_done() -> bool:
            nonlocal generating
            generating = max(generating, len(app.session.busy_titles()))
            return not any(p.busy for p in variants)

        await wait_for(pilot, all_done, "three replies")
        assert generating == 3 and all(p.display for p in variants)
        spans = [came[feed] for feed in feeds]
        # Each began before any other ended: written at the same time, on three slots.
        assert max(s[0] for s in spans) < min(s[-1] for s in spans)
        assert len({p.chat.messages[-1].text for p in variants}) > 1  # different temperatures, different replies
        # In the grid each box is titled; the tabs (which would repeat the titles) are hidden.
        assert all(p.border_title == p.chat_title for p in variants)
        assert not app.query_one("#chats ContentTabs").display
        for pane in variants:
            user, reply = pane.chat.messages
            assert (user.text, reply.role, reply.generated_tokens) == (PROMPT, "assistant", REPLY_TOKENS)
        # F7 on the second: after a confirmation the other two close, and it is a chat of its own.
        kept = variants[1]
        await pilot.click(f"#{kept.id} ChatInput")
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.chat_panes == [kept], "the siblings to close")
        assert kept.fan_out is None and kept.chat_title == "Write a short poem…" and not grid_on(app)
        assert tab_label(app, kept) == kept.chat_title and app.active_chat is kept
        saved = {c.id: c for c in ChatStore.open_existing().list_chats()}
        for pane in variants:
            assert saved[pane.chat.id].messages == 2  # type: ignore[index]
        # The closed ones are saved under what set them apart; the kept one under its own title.
        assert [saved[p.chat.id].title for p in variants] == [  # type: ignore[index]
            f"{PROMPT} (T=0.2)", PROMPT, f"{PROMPT} (T=1.2)"]
        # F7 on a chat of its own says what it is for.
        await pilot.press("f7")
        assert any("not part of a fan-out (f6 starts one)" in str(n.message) for n in app._notifications)

    app = make_app(tiny_model_dir, parallel=3, ctx_size=3072, sampling={"max_tokens": REPLY_TOKENS})
    app.sampling = dataclasses.replace(app.sampling, ignore_eos=True)
    run(app, scenario)


def test_fork_at_the_last_and_at_earlier_messages(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        parent = await two_turns(app, pilot)
        texts = [m.text for m in parent.chat.messages]

        async def fork(ups: int) -> ChatPane:
            app.show_chat(parent)
            before = list(app.chat_panes)
            await pilot.press("f8")
            await wait_for(pilot, lambda: isinstance(app.screen, TurnPickerScreen), "the turn picker")
            for _ in range(ups):
                await pilot.press("up")
            await pilot.press("enter")
            await wait_for(pilot, lambda: len(app.chat_panes) == len(before) + 1, "the fork")
            new = app.chat_panes[-1]
            assert app.active_chat is new and new.chat.title == parent.chat.title + " (fork)"
            saved = ChatStore.open_existing().load(new.chat.id)  # type: ignore[arg-type]
            assert saved is not None and [m.text for m in saved.messages] == [m.text for m in new.chat.messages]
            assert saved.title == new.chat.title
            return new

        at_last = await fork(0)  # Enter: at the last message
        assert [m.text for m in at_last.chat.messages] == texts and at_last.chat_input.text == ""
        at_reply = await fork(2)  # the first reply
        assert [m.text for m in at_reply.chat.messages] == texts[:2]
        at_mine = await fork(1)  # the second message of the user's: the fork stops before it
        assert [m.text for m in at_mine.chat.messages] == texts[:2] and at_mine.chat_input.text == texts[2]
        assert [m.text for m in parent.chat.messages] == texts  # the parent is as it was

    run(make_app(tiny_model_dir), scenario)


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_fork_sends_its_parents_history_and_reuses_its_kv(tiny_model_dir: Path, parallel: int) -> None:
    """One slot: the fork borrows the parent's slot, whose KV holds the shared history (parked when the
    fork takes it). Two slots: the fork sits on the other one and the engine copies the KV across."""
    prompts: list[list[dict[str, str]]] = []

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        parent = await two_turns(app, pilot)
        history = parent.chat.prompt()
        await pilot.press("f8", "enter")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the fork")
        fork = app.chat_panes[1]
        submit = app.session.submit
        app.session.submit = lambda key, messages, *a: (prompts.append(list(messages)), submit(key, messages, *a))[1]  # type: ignore[method-assign]
        await send(pilot, fork, "And the queue?")
        await wait_for(pilot, lambda: not fork.busy, "the fork's first reply")
        # Exactly the parent's rendered history, then the new message: the prefix can be reused.
        assert prompts == [history + [{"role": "user", "content": "And the queue?"}]]
        # The parent's whole last prompt (and more of its reply) came from the slot, not a prefill.
        stats, parents_last = fork.last_stats, parent.chat.messages[-1].prompt_tokens
        assert stats is not None and parents_last is not None
        assert stats.cached_tokens >= parents_last
        if parallel == 2:  # copied across from the parent's slot, which the fork did not take
            assert fork.slot_id != parent.slot_id and stats.restored_from == f"slot {parent.slot_id}"

    app = make_app(tiny_model_dir, parallel=parallel, ctx_size=2048, system_prompt="You are terse.")
    run(app, scenario)


def test_edit_an_earlier_message_and_resend(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await two_turns(app, pilot)
        await send(pilot, pane, "One more question")
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        old = [m.text for m in pane.chat.messages]
        assert len(old) == 6
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, TurnPickerScreen), "the picker")
        await pilot.press("up", "enter")  # the second of the user's three messages
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.conversation.editing, "the edit")
        assert pane.chat_input.text == "And what about the slots?"
        assert [t.has_class("-editing") for t in pane.query(".user-turn")] == [False, True, False]
        pane.chat_input.text = "And what about the KV cache?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not pane.busy, "the reply to the edited message")
        assert [m.text for m in pane.chat.messages][:3] == [old[0], old[1], "And what about the KV cache?"]
        assert len(pane.chat.messages) == 4 and len(pane.query(".user-turn")) == 2
        stats = pane.last_stats
        # The slot rolled back to the first turn, which it still held: only the edit was prefilled.
        assert stats is not None and stats.cached_tokens >= pane.chat.messages[1].prompt_tokens  # type: ignore[operator]
        store = ChatStore.open_existing()
        saved = store.load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and [m.text for m in saved.messages] == [m.text for m in pane.chat.messages]
        kept = [c for c in store.list_chats() if c.title == pane.chat.title + " (before edit)"]
        assert len(kept) == 1 and [m.text for m in store.load(kept[0].id).messages] == old  # type: ignore[union-attr]

    run(make_app(tiny_model_dir), scenario)


def test_the_chat_list_shows_the_badges_of_background_work(long_model_dir: Path) -> None:
    def lines(app: ChatApp) -> dict[str, str]:
        options = app.screen.query_one(OptionList)
        texts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        return {text.split()[1] if text[1] == " " else text.split()[0]: text for text in texts}

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        second = app.chat_panes[1]
        second.chat.sampling = dataclasses.replace(second.chat.sampling, max_tokens=8)
        await submit(pilot, first, "Writing")
        await submit(pilot, second, "Waiting")
        await wait_for(pilot, lambda: second.queued, "the queue")
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatListScreen), "the chat list")
        await wait_for(pilot, lambda: lines(app).get("Writing", "").startswith("● Writing"), "the ● badge")
        assert lines(app)["Waiting"].startswith("◷ Waiting")
        first.stop_reply()  # the slot goes to the waiting chat, which finishes out of view
        await wait_for(pilot, lambda: lines(app)["Waiting"].startswith("✓ Waiting"), "the ✓ badge")
        assert lines(app)["Writing"].startswith("Writing")  # a stopped reply is no news

    app = make_app(long_model_dir, parallel=1, ctx_size=65536, sampling={"max_tokens": 65536})
    app.sampling = dataclasses.replace(app.sampling, ignore_eos=True)
    run(app, scenario)


@needs_cpu  # (the accepted screen holds what the CPU computes)
def test_the_fan_out_form(ascii_model_dir: Path, snap_compare: Any) -> None:
    app = make_app(ascii_model_dir)

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        # The chat behind the form: its status line as the slots' refresh writes it (not the first one).
        await wait_for(pilot, lambda: "tokens" in pane.status_text, "the status line")
        await pilot.press("f6")
        await wait_for(pilot, lambda: isinstance(app.screen, FanOutScreen), "the fan-out form")
        app.screen.query_one("#fan-out-prompt", TextArea).text = PROMPT
        app.screen.query_one("#system-2").value = "Answer tersely."  # type: ignore[attr-defined]
        steady_cursors(app)
        await pilot.wait_for_scheduled_animations()  # the tab bar's underline slides to the shown tab

    assert snap_compare(app, terminal_size=(100, 32), run_before=run_before)


def test_three_fan_out_panes_side_by_side_in_the_grid(ascii_model_dir: Path) -> None:
    """The engine is held between two steps once the variants are sent: three labelled panes show at once.

    (Not a screenshot: whether a pane shows a scrollbar depends on when its reply's room was reserved.)
    """
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        hold_engine(app)
        variants = await fan_out(app, pilot, PROMPT)
        await wait_for(pilot, lambda: all(p.busy for p in variants), "the three replies")
        assert app.query_one("#chats").has_class("-grid")
        titles = [str(p.border_title) for p in variants]  # (no badge: each status line says what the chat does)
        assert [title.split(" · ")[0] for title in titles] == ["T=0.2", "T=0.7", "T=1.2"]
        regions = [p.region for p in variants]
        assert all(p.display and r.area for p, r in zip(variants, regions))
        assert len({(r.x, r.y) for r in regions}) == 3  # side by side, not stacked in one place

    run(make_app(ascii_model_dir, parallel=3, ctx_size=3072), scenario)
