"""The chat list on the real app: reopen a saved chat, search, rename and delete (with confirmation)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.paths import default_db_path
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.dialogs import TextPromptScreen
from mlxchat.app.ui.screens.find import FindScreen
from tests.markers import needs_cpu
from tests.pilot import make_app, open_second_chat, ready, run, send, steady_cursors, wait_for


def save_chats() -> dict[str, int]:
    """Three saved chats, none open; their ids by first word."""
    store, _ = ChatStore.open_for_app(default_db_path())
    ids = {}
    for question, answer in (("Cats?", "Cats purr."), ("Dogs?", "Dogs bark."), ("Fish?", "Fish swim.")):
        chat = Chat(None)
        chat.add("user", question)
        chat.add("assistant", answer).finish_reason = "stop"
        store.save(chat)
        assert chat.id is not None
        ids[question[:-1]] = chat.id
    store.close()
    return ids


def listed(screen: ChatListScreen) -> list[str]:
    options = screen.query_one(OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def open_list(app: ChatApp, pilot: Pilot) -> ChatListScreen:
    await pilot.press("ctrl+o")
    await wait_for(pilot, lambda: isinstance(app.screen, ChatListScreen), "the chat list")
    assert isinstance(app.screen, ChatListScreen)
    return app.screen


def test_reopen_and_search(tiny_model_dir: Path) -> None:
    ids = save_chats()

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_list(app, pilot)
        assert [line.split("  ·  ")[0] for line in listed(screen)] == ["Fish?", "Dogs?", "Cats?"]
        screen.query_one(Input).value = "PURR"  # searches the messages' text, in any case
        await wait_for(pilot, lambda: len(listed(screen)) == 1, "the search")
        assert listed(screen)[0].startswith("Cats?")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the reopened chat")
        cats = app.chat_panes[1]
        assert app.active_chat is cats and cats.chat.id == ids["Cats"]
        assert [str(w.render()) for w in cats.query(".user-turn").results(Static)] == ["Cats?"]
        # Opened from a search: the find bar shows the match in the chat; escape closes it.
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")
        assert app.screen_stack[0].get_selected_text() == "purr"
        await pilot.press("escape")

        screen = await open_list(app, pilot)
        assert listed(screen)[2].endswith("·  open")

    run(make_app(tiny_model_dir), scenario)


def test_rename_and_delete_with_confirmation(tiny_model_dir: Path) -> None:
    ids = save_chats()

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_list(app, pilot)
        await pilot.press("down")  # Fish -> Dogs
        assert screen.highlighted is not None and screen.highlighted.id == ids["Dogs"]
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, TextPromptScreen), "the rename prompt")
        app.screen.query_one(Input).value = "Canines"
        await pilot.press("enter")
        await wait_for(pilot, lambda: listed(screen)[1].startswith("Canines"), "the new name")

        await pilot.press("down")  # Dogs -> Cats
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen, "the list again")
        assert len(listed(screen)) == 3
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: len(listed(screen)) == 2, "the deletion")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatListScreen), "the list to close")

    run(make_app(tiny_model_dir), scenario)
    store = ChatStore.open_existing()
    assert store.load(ids["Cats"]) is None
    assert [c.title for c in store.list_chats()] == ["Fish?", "Canines"]


def test_an_open_chat_renamed_renames_its_tab_and_is_not_deleted(tiny_model_dir: Path) -> None:
    ids = save_chats()

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_list(app, pilot)
        await pilot.press("enter")  # Fish, the most recent
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the reopened chat")
        fish = app.chat_panes[1]
        screen = await open_list(app, pilot)
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, TextPromptScreen), "the rename prompt")
        app.screen.query_one(Input).value = "   "
        await pilot.press("enter")
        assert isinstance(app.screen, TextPromptScreen)  # an empty name is not taken
        app.screen.query_one(Input).value = "Fishes"
        await pilot.press("enter")
        await wait_for(pilot, lambda: fish.chat.title == "Fishes", "the rename")
        assert str(app.query_one("#chats").get_tab(fish.id or "").label) == "Fishes"  # type: ignore[attr-defined]
        assert fish.chat.id == ids["Fish"]
        # An open chat is not deleted: its tab would save it again.
        await pilot.press("ctrl+d")
        await pilot.pause()
        assert app.screen is screen
        assert ChatStore.open_existing().load(ids["Fish"]) is not None

    run(make_app(tiny_model_dir), scenario)


@needs_cpu  # (the accepted screen holds what the CPU computes)
def test_chat_list_screen(ascii_model_dir: Path, snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list over a chat, with saved chats of fixed dates (shown in UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    store, _ = ChatStore.open_for_app(default_db_path())
    for i, title in enumerate(("What is a terminal?", "Slots and the KV cache", "A very long question " * 6)):
        chat = Chat(None)
        chat.add("user", title)
        chat.add("assistant", "An answer.")
        chat.created = chat.updated = f"2025-0{i + 1}-15T12:00:00.000+00:00"
        store.save(chat)
    store.close()
    app = make_app(ascii_model_dir)

    async def run_before(pilot: Pilot) -> None:
        await ready(app, pilot)
        await open_list(app, pilot)
        steady_cursors(app)

    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_chats_that_begin_alike_are_told_apart_in_tabs_and_in_the_list(tiny_model_dir: Path) -> None:
    from textual.widgets import TabbedContent

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        for pane in (first, second):
            await send(pilot, pane, "Write a very long document about the same thing")
            await wait_for(pilot, lambda pane=pane: not pane.busy, "the reply")
        tabs = app.query_one("#chats", TabbedContent)
        labels = [str(tabs.get_tab(pane.id or "").label) for pane in (first, second)]
        assert labels == ["Write a very long d… #1", "Write a very long d… #2"]
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatListScreen), "the chat list")
        rows = [str(option.prompt) for option in app.screen.query_one(OptionList)._options]
        assert [row.split("  ·  ")[3] for row in rows] == [f"#{second.chat.id}", f"#{first.chat.id}"]

    run(make_app(tiny_model_dir), scenario)
