"""Finding text in the shown chat (ctrl+f) and across every saved chat (the chat list's search)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.selection import Selection
from textual.widgets import Input, Static

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.paths import default_db_path
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.find import FindScreen, Match
from tests.pilot import make_app, ready, run, submit, wait_for

REPLIES = (
    "An **Apple** a day.\n\n- one apple\n- two pears\n",
    "```python\nfruit = 'apple'\n```\n\nThat is all about apples.",
)


def saved_open_chat(user: tuple[str, ...], replies: tuple[str, ...], title: str = "fruit") -> int:
    """A chat saved and left open by an mlxchat that quit: the app reopens it."""
    store, _ = ChatStore.open_for_app(default_db_path())
    chat = Chat(None, title=title)
    for question, reply in zip(user, replies):
        chat.add("user", question)
        chat.add("assistant", reply)
    store.save(chat)
    assert chat.id is not None
    store.set_open([chat.id], chat.id)
    store.close()
    return chat.id


def matched_line(match: Match | None) -> str:
    """The line the match is on, as its widget shows it."""
    assert match is not None
    shown = match.widget.get_selection(Selection(None, None))
    assert shown is not None
    return shown[0].splitlines()[match.line]


def test_find_selects_each_match_of_the_shown_text_in_turn(tiny_model_dir: Path) -> None:
    saved_open_chat(("Tell me about apples", "And in code?"), REPLIES)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        chats = app.screen
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")
        bar = app.screen
        assert isinstance(bar, FindScreen)
        await pilot.press(*"APPLE")
        # The text as shown: your message, "**Apple**" as "Apple", the list, the code block, "apples".
        assert len(bar.matches) == 5
        count = bar.query_one(".find-count", Static)
        assert str(count.render()) == "5 of 5"  # the newest first
        assert chats.get_selected_text() == "apple"
        assert "apples" in matched_line(bar.current)
        await pilot.press("enter")  # the one before
        assert str(count.render()) == "4 of 5" and chats.get_selected_text() == "apple"
        assert "fruit = 'apple'" in matched_line(bar.current)
        await pilot.press("down", "down")  # later, wrapping around to the first
        assert str(count.render()) == "1 of 5"
        assert matched_line(bar.current) == "Tell me about apples"
        await pilot.press("down")
        assert str(count.render()) == "2 of 5" and chats.get_selected_text() == "Apple"
        await pilot.press("ctrl+f", "ctrl+f")  # ctrl+f again: the one before, as enter
        assert str(count.render()) == "5 of 5"
        conversation = pane.query_one(".conversation")
        assert bar.current is not None and bar.current.widget.region.overlaps(conversation.region)

        await pilot.press(*"zzz")
        assert bar.matches == [] and str(count.render()) == "no match"
        assert chats.get_selected_text() is None
        await submit(pilot, pane, "Applezzz, said the bee")  # text the chat shows later is found too
        await wait_for(pilot, lambda: len(bar.matches) == 1, "the new match")
        assert str(count.render()) == "1 of 1" and chats.get_selected_text() == "Applezzz"
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        await pilot.press("escape")
        assert len(app.screen_stack) == 1 and app.focused is pane.chat_input

    run(make_app(tiny_model_dir), scenario)


def test_the_chat_list_says_where_a_search_matched(tiny_model_dir: Path) -> None:
    saved_open_chat(("Tell me about apples",), REPLIES[:1], title="fruit")
    store, _ = ChatStore.open_for_app(default_db_path())
    other = Chat(None, title="weather")
    other.add("user", "Will it rain?")
    other.add("assistant", "Some clouds, then " + "a long forecast " * 10 + "and a pear-shaped cloud at noon.")
    store.save(other)
    store.close()

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: app.screen.query(Input).results(Input), "the chat list")
        await pilot.press(*"pear")
        screen = app.screen
        lines = [str(option.prompt) for option in screen.query_one("OptionList")._options]  # type: ignore[attr-defined]
        assert len(lines) == 2
        weather, fruit = lines
        assert weather.startswith("weather") and "in reply 1: …" in weather and "pear-shaped cloud" in weather
        assert fruit.startswith("fruit") and "in reply 1: " in fruit and "two pears" in fruit
        await pilot.press("backspace", "backspace", "backspace", "backspace", *"weath")
        (line,) = [str(option.prompt) for option in screen.query_one("OptionList")._options]  # type: ignore[attr-defined]
        assert line.startswith("weather") and "in the title" in line
        await pilot.press("backspace", "backspace", "backspace", "backspace", "backspace", *"cloud", "enter")
        # Opened from a search, the chat shows the find bar on its matches.
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")
        assert app.active_chat is not None and app.active_chat.chat.title == "weather"
        bar = app.screen
        assert isinstance(bar, FindScreen) and bar.query_one(Input).value == "cloud"
        await wait_for(pilot, lambda: len(bar.matches) == 2, "both matches")
        assert app.screen_stack[0].get_selected_text() == "cloud"

    run(make_app(tiny_model_dir), scenario)


def test_a_chat_already_open_found_in_the_list_is_shown_with_the_find_bar(tiny_model_dir: Path) -> None:
    saved_open_chat(("Tell me about apples",), REPLIES[:1], title="fruit")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        fruit = await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2 and app.active_chat is not fruit, "a new chat")
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: app.screen.query(Input).results(Input), "the chat list")
        await pilot.press(*"pears", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")
        assert app.active_chat is fruit
        assert app.screen_stack[0].get_selected_text() == "pears"

    run(make_app(tiny_model_dir), scenario)
