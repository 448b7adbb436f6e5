"""Nothing is lost without a word: closing a chat with a draft or a reply being written asks, and so does quitting
while replies are written (unless confirm_quit is off)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from tests.pilot import HeldWhen, make_app, open_second_chat, press_to_end, ready, run, submit, wait_for


def question(app: ChatApp) -> str:
    assert isinstance(app.screen, ConfirmScreen)
    return str(app.screen.query_one(".confirm-question").render())


def test_closing_a_chat_with_a_draft_asks_and_no_keeps_it(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        await pilot.press(*"half a thought")
        await pilot.press("ctrl+w")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        assert question(app) == "Its message box holds an unsent draft of 3 words, which is lost."
        await pilot.press("n")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1, "the chats again")
        assert len(app.chat_panes) == 2 and second.chat_input.text == "half a thought"
        await pilot.press("ctrl+w", "y")
        await wait_for(pilot, lambda: len(app.chat_panes) == 1, "the chat to close")
        # An empty chat closes at once.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "a new chat")
        await pilot.press("ctrl+w")
        await wait_for(pilot, lambda: len(app.chat_panes) == 1, "the empty chat to close")
        assert len(app.screen_stack) == 1

    run(make_app(tiny_model_dir), scenario)


def test_quitting_while_a_reply_is_written_asks(endless_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        hold = HeldWhen(app, lambda core: core.slots[0].request is not None and core.slots[0].request.generated >= 2)
        await submit(pilot, pane, "Tell me about the terminal app")
        await hold.held()
        await pilot.press("ctrl+w")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the close question")
        assert "its reply is still being written: it stops" in question(app).lower()
        await pilot.press("n")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the quit question")
        assert question(app).startswith(f"1 reply is still being written ({pane.chat_title})")
        await pilot.press("n")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1, "the chats again")
        assert app.is_running and pane.busy
        hold.release()
        await pilot.press("ctrl+q")
        await press_to_end(app, "y")

    app = make_app(endless_model_dir, sampling={"max_tokens": 2000})
    run(app, scenario)
    assert app.return_code == 0 and not app.is_running


def test_confirm_quit_off_quits_at_once(endless_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        hold = HeldWhen(app, lambda core: core.slots[0].request is not None)
        await submit(pilot, pane, "Tell me about the terminal app")
        await hold.held()
        await press_to_end(app, "ctrl+q")  # (it ends at once)

    app = make_app(endless_model_dir, confirm_quit=False, sampling={"max_tokens": 2000})
    run(app, scenario)
    assert app.return_code == 0 and not app.is_running
