"""Chats that last: the app saves as it goes, restores its tabs on launch, survives kill -9 and failed saves."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.chats import conversation
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.paths import default_db_path
from mlxchat.app.ui.widgets.reply_view import ReplyView
from tests.pilot import make_app, press_to_end, ready, run, send, wait_for

REPO = Path(__file__).resolve().parents[2]


def turns(app: ChatApp) -> list[list[tuple[str, str]]]:
    """What each tab shows, in tab order: (kind, text) of every user turn and reply."""
    shown = []
    for pane in app.chat_panes:
        widgets = pane.query(".user-turn, .assistant-turn")
        shown.append([("user", str(w.render())) if isinstance(w, Static) else ("assistant", w.text)
                      for w in widgets if isinstance(w, (Static, ReplyView))])
    return shown


def test_chats_come_back_after_a_restart(tiny_model_dir: Path) -> None:
    before: list[list[tuple[str, str]]] = []

    async def first_run(app: ChatApp, pilot: Pilot) -> None:
        one = await ready(app, pilot)
        for text in ("Hello there", "Tell me more about it"):
            await send(pilot, one, text)
            await wait_for(pilot, lambda: not one.busy, "a reply")
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        two = app.chat_panes[1]
        await send(pilot, two, "The quick brown fox")
        await wait_for(pilot, lambda: not two.busy, "a reply")
        await pilot.press("ctrl+n")  # a third chat, left empty: nothing to restore
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "the third chat")
        await pilot.press("alt+1")
        assert app.active_chat is one
        before.extend(turns(app)[:2])
        assert [len(t) for t in before] == [4, 2] and all(text for t in before for _, text in t)
        await press_to_end(app, "ctrl+q")

    async def second_run(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "both chats")
        assert turns(app) == before
        one, two = app.chat_panes
        assert app.active_chat is one and app.focused is one.chat_input
        assert [pane.slot_id for pane in app.chat_panes] == [0, 1]
        assert len(app.chat_panes) == 2
        tab_label = str(app.query_one("#chats").get_tab(one.id or "").label)  # type: ignore[attr-defined]
        assert tab_label == "Hello there"
        # The restored chat goes on: its next prompt holds the whole conversation, most of it read back
        # from the KV saved on disk when the first run quit.
        earlier = one.chat.messages[-1].prompt_tokens
        await send(pilot, one, "And then?")
        await wait_for(pilot, lambda: not one.busy, "a reply")
        assert earlier is not None and one.chat.messages[-1].prompt_tokens > earlier  # type: ignore[operator]
        # Its timings are saved with it: where its cached tokens came from, and its first token's time.
        reply = one.chat.messages[-1]
        assert reply.cached_from == "disk" and reply.ttft_ms and reply.ttft_ms > 0
        # At least the whole prompt of the turn before the restart (a random model's reply, byte soup,
        # re-tokenizes otherwise than it was generated, so the match ends where that reply starts).
        assert reply.cached_tokens >= earlier - 1  # type: ignore[operator]
        assert len(one.chat.messages) == 6

    run(make_app(tiny_model_dir, parallel=3), first_run)
    run(make_app(tiny_model_dir, parallel=3), second_run)
    store = ChatStore.open_existing()
    assert [len(c.messages) for c in store.claim_open_chats()[0]] == [6, 2]


def test_a_closed_chat_is_not_reopened(tiny_model_dir: Path) -> None:
    async def first_run(app: ChatApp, pilot: Pilot) -> None:
        one = await ready(app, pilot)
        await send(pilot, one, "Hello there")
        await wait_for(pilot, lambda: not one.busy, "a reply")
        await pilot.press("ctrl+w")
        await wait_for(pilot, lambda: not app.chat_panes, "the chat to close")

    async def second_run(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert len(app.chat_panes) == 1 and pane.chat.messages == [] and pane.chat.id is None

    run(make_app(tiny_model_dir), first_run)
    run(make_app(tiny_model_dir), second_run)
    assert [c.messages for c in ChatStore.open_existing().list_chats()] == [2]


def test_more_open_chats_than_slots_all_come_back(tiny_model_dir: Path) -> None:
    async def first_run(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("ctrl+n", "ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "three chats")
        for pane, text in zip(app.chat_panes, ("One", "Two", "Three")):
            await send(pilot, pane, text)
            await wait_for(pilot, lambda: not pane.busy, "a reply")
        await press_to_end(app, "ctrl+q")

    async def second_run(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "all three chats, on two slots")
        assert [p.chat.title for p in app.chat_panes] == ["One", "Two", "Three"]
        assert [p.slot_id for p in app.chat_panes] == [0, 1, None]
        third = app.chat_panes[2]
        await send(pilot, third, "Still there?")  # it borrows a slot
        await wait_for(pilot, lambda: not third.busy, "a reply")
        assert [m.role for m in third.chat.messages] == ["user", "assistant"] * 2

    run(make_app(tiny_model_dir, parallel=3, sampling={"max_tokens": 8}), first_run)
    run(make_app(tiny_model_dir, parallel=2, sampling={"max_tokens": 8}), second_run)


def test_a_read_only_database_is_shown_and_the_chat_saved_once_it_can_be(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chats.db"
    ChatStore.open_for_app(path)[0].close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA query_only = ON")  # SQLite refuses writes as for a read-only file
    monkeypatch.setattr(ChatStore, "open_for_app", classmethod(lambda cls, p=None: (ChatStore(db, path), None)))
    monkeypatch.setattr(conversation, "SAVE_RETRY_S", 0.2)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there " * 100)
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        problem = pane.query_one(".save-problem", Static)
        assert problem.display and "attempt to write a readonly database" in str(problem.render())
        assert "kept here" in str(problem.render())
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]  # nothing lost in memory
        assert pane.chat.id is None
        db.execute("PRAGMA query_only = OFF")  # writable again
        await wait_for(pilot, lambda: not problem.display, "the retried save")
        assert pane.chat.id is not None and app.store is not None
        # The tab is recorded when the app handles the pane's Retitled message, a moment after the save.
        await wait_for(pilot, lambda: [c.open_here for c in app.store.list_chats()] == [True], "the tab recorded")
        label = str(app.query_one("#chats").get_tab(pane.id or "").label)  # type: ignore[attr-defined]
        assert label == pane.chat_title and label.startswith("Hello there")

    run(make_app(tiny_model_dir), scenario)
    saved = ChatStore(sqlite3.connect(path), path).claim_open_chats()[0]
    assert [[m.role for m in c.messages] for c in saved] == [["user", "assistant"]]


CHILD = """
import asyncio, dataclasses, sys
from mlxchat.engine.cpu.blas import load_blas
load_blas("auto")
from tests.pilot import HeldWhen, make_app, ready, submit

async def main() -> None:
    app = make_app(sys.argv[1], parallel=1, ctx_size=4096, sampling={"max_tokens": 4096})
    app.sampling = dataclasses.replace(app.sampling, ignore_eos=True)  # (the tiny model may end a reply early)
    async with app.run_test() as pilot:
        pane = await ready(app, pilot)
        # The reply is held half-written, so it is still streaming when the parent kills this process.
        HeldWhen(app, lambda core: core.slots[0].request is not None and core.slots[0].request.generated >= 40)
        await submit(pilot, pane, "Tell me about the terminal app")
        conversation = pane.conversation
        save = conversation.save_reply

        def saved(*args, **kwargs):  # what each save of the streaming reply wrote, as it is written
            save(*args, **kwargs)
            print(f"saved {len(conversation.reply_text)}", flush=True)

        conversation.save_reply = saved
        while pane.busy:
            await pilot.pause(0.05)

asyncio.run(main())
"""


def test_kill_9_while_streaming_loses_nothing_saved(tiny_model_dir: Path) -> None:
    """A reply being written is saved as it streams (every SAVE_INTERVAL_S); killed with SIGKILL, the app loses
    nothing it had saved: the database holds the reply as the last save wrote it, marked unfinished."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_model_dir)], cwd=REPO, stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ))
    saves: list[int] = []
    try:
        assert child.stdout is not None
        # The engine is held: once a save writes what the one before it wrote, nothing more is coming.
        while len(saves) < 2 or saves[-1] != saves[-2] or not saves[-1]:
            line = child.stdout.readline()
            assert line, f"the child ended before the kill (status {child.wait()})"
            saves.append(int(line.split()[1]))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    store, notice = ChatStore.open_for_app(default_db_path())
    assert notice is None  # the file is sound: nothing set aside
    (chat,) = store.list_chats()
    loaded = store.load(chat.id)
    assert loaded is not None
    user, reply = loaded.messages
    assert (user.role, user.text) == ("user", "Tell me about the terminal app")
    assert reply.role == "assistant" and reply.finish_reason is None  # interrupted, and known to be
    assert len(reply.text) == saves[-1]


def test_a_streaming_reply_is_due_for_saving_each_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved, a streaming reply is due again SAVE_INTERVAL_S later, not sooner: a crash loses at most that much."""
    clock = [100.0]
    monkeypatch.setattr(conversation.time, "monotonic", lambda: clock[0])
    store, _ = ChatStore.open_for_app(tmp_path / "chats.db")
    talk = conversation.Conversation(Chat(None), store, lambda ok, first: None)
    talk.add_message("Hello")  # saved now
    talk.reply_parts.append("Hi")
    assert not talk.save_due()
    clock[0] += conversation.SAVE_INTERVAL_S - 0.01
    assert not talk.save_due()
    clock[0] += 0.01
    assert talk.save_due()
    talk.save_reply()
    saved = store.load(talk.chat.id)  # type: ignore[arg-type]
    assert not talk.save_due() and saved is not None and saved.messages[-1].text == "Hi"


def test_a_draft_is_kept_across_a_restart_until_it_is_sent(tiny_model_dir: Path) -> None:
    async def write_and_quit(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        await pilot.press(*"half a thought")
        await press_to_end(app, "ctrl+q")

    async def finds_the_draft_and_sends_it(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await wait_for(pilot, lambda: bool(pane.chat.messages), "the chat reopened")
        assert pane.chat_input.text == "half a thought"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(pane.chat.messages) == 4 and not pane.busy, "the draft sent, and its reply")
        await press_to_end(app, "ctrl+q")

    async def finds_no_draft(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await wait_for(pilot, lambda: bool(pane.chat.messages), "the chat reopened")
        assert pane.chat_input.text == "" and pane.chat.messages[2].text == "half a thought"

    for scenario in (write_and_quit, finds_the_draft_and_sends_it, finds_no_draft):
        run(make_app(tiny_model_dir), scenario)


def test_drafts_are_kept_while_mlxchat_runs_not_only_at_quit(tiny_model_dir: Path) -> None:
    """Every DRAFTS_EVERY_S the saved chats' drafts are written where they changed: a crash loses at most that much
    typing (the timer's work is called here at once: the test does not wait for it)."""

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        await pilot.press(*"typed, not sent")
        app.startup.keep_drafts()
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and saved.draft == "typed, not sent"

    run(make_app(tiny_model_dir), scenario)
