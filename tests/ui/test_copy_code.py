"""Copying one code block of a chat's replies (alt+shift+c): the only one at once, else picked, the newest first."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList, Static

from mlxchat.app.chats.code_blocks import code_blocks
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.paths import default_db_path
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.code_picker import CodePickerScreen
from tests.pilot import from_terminal, make_app, ready, run, wait_for

FIRST_REPLY = "Use this:\n\n```python\nprint('hello')\n```\n"
LAST_REPLY = "Run it:\n\n```bash\nls -la\ncd /tmp\n```\n\nor, indented:\n\n    make test\n\nDone."


def saved_open_chat(*replies: str) -> None:
    """A chat with these replies, saved and left open by an mlxchat that quit: the app reopens it."""
    store, _ = ChatStore.open_for_app(default_db_path())
    chat = Chat(None, title="code")
    for number, reply in enumerate(replies, 1):
        chat.add("user", f"question {number}")
        chat.add("assistant", reply)
    store.save(chat)
    assert chat.id is not None
    store.set_open([chat.id], chat.id)
    store.close()


def test_code_blocks_are_read_as_the_markdown_shows_them() -> None:
    blocks = code_blocks(LAST_REPLY, reply=2)
    assert [(b.language, b.code, b.reply) for b in blocks] == [("bash", "ls -la\ncd /tmp", 2), ("", "make test", 2)]
    assert [b.describe() for b in blocks] == ["bash block, 2 lines", "code block, 1 line"]


def test_the_picker_offers_every_block_with_the_last_selected(tiny_model_dir: Path) -> None:
    saved_open_chat(FIRST_REPLY, LAST_REPLY)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert [m.text for m in pane.chat.messages if m.role == "assistant"] == [FIRST_REPLY, LAST_REPLY]
        await pilot.press("alt+shift+c")
        await wait_for(pilot, lambda: isinstance(app.screen, CodePickerScreen), "the picker")
        picker = app.screen
        options = picker.query_one(OptionList)
        assert options.option_count == 3 and options.highlighted == 2
        assert str(picker.query_one(".code-preview", Static).render()) == "make test"
        await pilot.press("enter")
        assert app.clipboard == "make test" and len(app.screen_stack) == 1

        await pilot.press("alt+shift+c")
        await wait_for(pilot, lambda: isinstance(app.screen, CodePickerScreen), "the picker")
        await pilot.press("up", "up")
        assert str(app.screen.query_one(".code-preview", Static).render()) == "print('hello')"
        await pilot.press("enter")
        assert app.clipboard == "print('hello')"

        await pilot.press("alt+shift+c")
        await wait_for(pilot, lambda: isinstance(app.screen, CodePickerScreen), "the picker")
        await pilot.press("up", "escape")  # cancelled: the clipboard keeps what it had
        assert app.clipboard == "print('hello')" and len(app.screen_stack) == 1
        assert app.focused is pane.chat_input

        await pilot.press("alt+c")  # the whole reply, as before
        assert app.clipboard == LAST_REPLY

    run(make_app(tiny_model_dir), scenario)


def test_a_single_block_is_copied_at_once_and_none_is_said(tiny_model_dir: Path) -> None:
    saved_open_chat(FIRST_REPLY)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.press("alt+shift+c")
        assert app.clipboard == "print('hello')" and len(app.screen_stack) == 1
        assert any("Copied a python block, 1 line, from reply 1" in n.message for n in app._notifications)
        # It says how it went out, and that a terminal may not pass it on (mlxchat cannot tell).
        assert any("through the terminal (OSC 52)" in n.message and "set-clipboard on" in n.message
                   for n in app._notifications)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2 and app.active_chat is not pane, "a new chat")
        await pilot.press("alt+shift+c")
        assert app.clipboard == "print('hello')"
        assert any("no code block" in n.message for n in app._notifications)

    run(make_app(tiny_model_dir), scenario)


def test_the_alt_keys_work_as_a_terminal_sends_them_not_typed_in_the_message_box(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_open_chat(FIRST_REPLY, LAST_REPLY)
    monkeypatch.chdir(tmp_path)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert app.focused is pane.chat_input
        await from_terminal(app, pilot, "\x1bc")  # alt+c
        assert app.clipboard == LAST_REPLY
        await from_terminal(app, pilot, "\x1bC")  # alt+shift+c
        await wait_for(pilot, lambda: isinstance(app.screen, CodePickerScreen), "the picker")
        await pilot.press("enter")
        assert app.clipboard == "make test"
        await from_terminal(app, pilot, "\x1be")  # alt+e
        assert (tmp_path / f"mlxchat-chat-{pane.chat.id}.md").exists()
        assert pane.chat_input.text == ""

    run(make_app(tiny_model_dir), scenario)
