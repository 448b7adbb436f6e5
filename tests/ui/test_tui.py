"""The chat app, driven with Pilot on the tiny generated model: start-up, chats, streaming, stop, refusal."""

from __future__ import annotations

import asyncio
import io
import tomllib
from pathlib import Path

import pytest
from rich.console import Console
from textual import events
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.config.loading import load_settings
from mlxchat.app.paths import default_config_path
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from mlxchat.app.ui.screens.help import HelpScreen
from mlxchat.app.ui.screens.inspector import InspectorScreen
from mlxchat.app.ui.screens.slots import SlotsScreen
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.ui.screens.loading import LoadingScreen
from tests.pilot import (
    HeldWhen, make_app, notes, open_second_chat, press_to_end, ready, reply_held, run, send, submit, two_replies_held,
    wait_for,
)


def test_opens_with_one_focused_chat(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert len(app.chat_panes) == 1
        assert isinstance(app.focused, ChatInput) and app.focused is pane.chat_input
        assert app.session.plan is not None and app.session.plan.per_slot == 1024
        await wait_for(pilot, lambda: "1024 tokens" in pane.status_text, "the status line")

    run(make_app(tiny_model_dir), scenario)


def test_reply_streams_to_done(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello, how are you today?")
        assert pane.chat_input.text == ""
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]
        reply = pane.query_one(".assistant-turn", ReplyView)
        assert reply.text == pane.chat.messages[1].text != ""
        assert not reply.streaming and reply.size.height == reply.get_content_height(
            reply.size, reply.size, reply.content_region.width)  # as tall as its lines, no room reserved

    run(make_app(tiny_model_dir), scenario)


def test_two_chats_stream_at_once(endless_model_dir: Path) -> None:
    """A message sent while another chat's reply streams is read beside it, and then both slots decode in one
    pass, as the engine's own record says (a pane's `busy` is also true while a request waits)."""

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        assert (first.slot_id, second.slot_id) == (0, 1)
        assert app.focused is second.chat_input
        await pilot.press("alt+1")
        assert app.active_chat is first and app.focused is first.chat_input
        await pilot.press("alt+2")
        assert app.active_chat is second
        # Held once the first reply streams: the second message reaches an engine that is mid-reply.
        hold = HeldWhen(app, lambda core: any(s.request and s.request.generated >= 2 for s in core.slots))
        await submit(pilot, first, "Tell me about the terminal app")
        await hold.held()
        await submit(pilot, second, "The quick brown fox")
        hold.release()
        await wait_for(pilot, lambda: not first.busy and not second.busy, "both replies")
        assert app.session.snapshot().widest_pass == 2, "the two replies never shared a decode pass"
        for pane in (first, second):  # the endless model writes until max_tokens
            assert pane.chat.messages[-1].finish_reason == "length" and pane.chat.messages[-1].text
        # With both slots taken a third chat opens all the same: it borrows a slot when it sends.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "a third chat, beyond the slots")
        third = app.chat_panes[2]
        # An empty chat has no history to bring back: its line says only how it gets a slot.
        assert third.slot_id is None and third.status_text == "no slot · it borrows an idle one when you send"
        # Closing a chat frees its slot, which the chat without one takes.
        await pilot.press("alt+1", "ctrl+w")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the chat to close")
        assert [p.slot_id for p in app.chat_panes] == [1, 0]

    run(make_app(endless_model_dir, sampling={"max_tokens": 64}), scenario)


def test_escape_stops_a_reply_and_keeps_it(long_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane, _, hold = await reply_held(app, pilot, "Tell me about the terminal app", 2)
        await pilot.press("escape")
        hold.release()
        await wait_for(pilot, lambda: not pane.busy, "the stop")
        assert notes(pane) == ["(stopped)"]
        assert pane.chat.messages[-1].role == "assistant" and pane.chat.messages[-1].text

    # Held while it streams, a reply that could run to the end of its slot is stopped whatever the machine's speed.
    run(make_app(long_model_dir, parallel=1, ctx_size=65536, sampling={"max_tokens": 65536}), scenario)


def test_overflowing_message_is_refused_and_stays_in_the_input(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        text = "The user asks a question and the assistant answers it. " * 40
        await send(pilot, pane, text)
        await wait_for(pilot, lambda: not pane.busy, "the refusal")
        assert pane.chat_input.text == text
        assert pane.chat.messages == []
        assert not pane.query(".user-turn")
        (note,) = notes(pane)
        assert note.startswith("Not sent: this message does not fit its slot") and "over the slot's 256" in note
        # Refused before it was sent: no empty chat is left in the chat list.
        assert app.store is not None and app.store.list_chats() == [] and pane.chat.id is None

    run(make_app(tiny_model_dir, ctx_size=512), scenario)


def test_bad_model_path_shows_what_to_change(tmp_path: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.failed, "the failure")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, LoadingScreen)
        problem = str(screen.query_one("#loading-problem", Static).render())
        remedy = str(screen.query_one("#loading-remedy", Static).render())
        assert "no-such-model" in problem
        assert "--model" in remedy
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_code == 1

    run(make_app(tmp_path / "no-such-model"), scenario)


def test_refused_slot_plan_says_what_to_change(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.failed, "the failure")
        await pilot.pause()
        problem = str(app.screen.query_one("#loading-problem", Static).render())
        remedy = str(app.screen.query_one("#loading-remedy", Static).render())
        assert "ctx_size = 40000 (--ctx-size) is more than the model can use" in problem
        assert "--parallel" in remedy
        assert app.session.engine is None
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_code == 2  # refused settings end the app as they end every command

    # The tiny model is trained on 4096 tokens: 8 slots of it hold at most 32768.
    run(make_app(tiny_model_dir, parallel=8, ctx_size=40000), scenario)


def test_grid_shows_every_chat_and_follows_the_keyboard(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        assert not first.display and second.display  # tabs: one chat at a time
        await pilot.press("f4")
        assert first.display and second.display
        assert first.border_title == "Chat 1"
        await pilot.press("ctrl+pagedown")  # wraps from the last chat to the first
        assert app.active_chat is first and app.focused is first.chat_input
        assert first.display and second.display, "switching chats in the grid hid one"
        # Clicking into a chat makes it the active one, so escape stops that chat's reply.
        await pilot.click(second.chat_input)
        assert app.active_chat is second
        await pilot.press("ctrl+pageup")
        assert app.active_chat is first
        await pilot.press("f4")
        assert first.display and not second.display and first.border_title is None

    run(make_app(tiny_model_dir), scenario)


def test_a_box_retitled_in_the_grid_is_repainted_on_its_top_line_only(tiny_model_dir: Path) -> None:
    """Its title is on its top border: the screen update that shows a new one draws that line, not the whole box
    (every widget in it drawn again, for each chat's first message)."""
    from textual._compositor import ChopsUpdate
    from textual.geometry import Region

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, _ = await open_second_chat(app, pilot)
        await pilot.press("f4")
        await pilot.pause()
        updates: list[object] = []
        shown = app._display
        app._display = lambda screen, update: (updates.append(update), shown(screen, update))[-1]  # type: ignore
        first.retitle("A new title")
        await pilot.pause()
        lines = {y for update in updates if isinstance(update, ChopsUpdate) for y, _, _ in update.spans}
        assert lines == {first.region.y}, "the box's other lines were drawn again"
        assert "A new title" in first.render_lines(Region(0, 0, first.outer_size.width, 1))[0].text

    run(make_app(tiny_model_dir), scenario)


def test_the_focus_stays_in_the_chat_it_moved_to_while_another_was_being_shown(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await open_second_chat(app, pilot)
        await pilot.press("f4")
        for _ in range(3):
            await app.action_new_chat()
        panes = app.chat_panes
        await pilot.pause()
        # Chat 4 is being shown (its tab events are still on their way) when the keyboard moves to
        # chat 1, as a click into it would: the focus must stay there, and not bounce back and forth.
        app.action_goto_chat(4)
        panes[0].focus_input()
        seen = []
        for _ in range(20):
            await pilot.pause(0.02)
            seen.append(app.chat_panes.index(app._chat_of(app.focused)) + 1)
        assert seen[-10:] == [1] * 10, f"the focus went from chat to chat: {seen}"
        assert app.active_chat is panes[0]

    run(make_app(tiny_model_dir), scenario)


def help_lines(screen: HelpScreen) -> list[str]:
    """The help page's tables as they are drawn, line by line, at the width they have."""
    lines = []
    for widget in screen.query(".help-table").results(Static):
        console = Console(width=widget.content_region.width, record=True, color_system=None, file=io.StringIO())
        console.print(widget.content)
        lines += console.export_text().splitlines()
    return lines


def test_help_lists_the_keys_as_remapped(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "a chat from the remapped key")
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        lines = help_lines(app.screen)
        assert any(line.split()[:2] == ["ctrl+t", "new_chat"] and "Open a new chat" in line for line in lines)
        assert any(line.split()[:2] == ["f10", "toggle_grid"] for line in lines)
        assert any(line.split()[:2] == ["enter", "Send"] for line in lines)
        await pilot.press("ctrl+n")  # chat keys do nothing over the help
        assert len(app.chat_panes) == 2
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        # A chat's own key (its pane's binding) follows the keymap too, in the chat being typed in.
        assert any(line.split()[:2] == ["f12", "chat_settings"] for line in lines)
        await pilot.press("f5")
        await pilot.pause()
        assert not isinstance(app.screen, ChatSettingsScreen)
        await pilot.press("f12")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the chat's settings")
        title = str(app.screen.query_one(".settings-title", Static).render())
        assert title.startswith(f"Settings of “{app.active_chat.chat_title}”")

    run(make_app(tiny_model_dir, keys={"new_chat": "ctrl+t", "toggle_grid": "f10", "chat_settings": "f12"}),
        scenario)


@pytest.mark.parametrize("width", [80, 100, 160])
def test_help_shows_every_id_and_whole_descriptions_at_every_width(tiny_model_dir: Path, width: int) -> None:
    """F1 gives each remappable action's [keys] id whole, on its key's line, and what it does wrapped, not cut."""
    from mlxchat.app.actions import ACTIONS

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("f1")
        lines = help_lines(app.screen)  # type: ignore[arg-type]
        assert all(len(line.rstrip()) <= app.screen.size.width for line in lines)
        assert any(line.split()[:5] == ["→", "/", "+", "/", "="] for line in lines)  # not right / plus / equals_sign
        words = " ".join(" ".join(lines).split())
        for action in ACTIONS:
            if action.description and action.help:
                assert any(line.split()[:2] == [action.key, action.id] for line in lines), action.id
                assert " ".join(action.help.split()[:3]) in words, action.id

    async def main() -> None:
        app = make_app(tiny_model_dir)
        async with app.run_test(size=(width, 40)) as pilot:
            await scenario(app, pilot)

    asyncio.run(main())


def test_the_footer_is_made_anew_only_when_its_keys_change(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        await pilot.pause()
        keys = list(app.screen.query(FooterKey))
        for pane in (first, second, first):  # one chat's message box to another's: the same keys
            pane.focus_input()
            await pilot.pause()
            await pilot.pause()
        assert app.focused is first.chat_input
        assert list(app.screen.query(FooterKey)) == keys, "the footer made the same keys anew"
        app.set_keymap({"help": "f10"})
        await wait_for(pilot, lambda: "f10" in {key.key for key in app.screen.query(FooterKey)}, "the remapped key")

    run(make_app(tiny_model_dir), scenario)


def test_every_screen_s_footer_shows_help_slots_and_inspector(tiny_model_dir: Path) -> None:
    def footer_keys(app: ChatApp) -> set[str]:
        return {key.key for key in app.screen.query(FooterKey)}

    shown = {"f10", "f2", "f3"}  # help remapped: the modal screens' copies follow the keymap too

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        assert shown <= footer_keys(app)
        await pilot.press("f2")
        assert isinstance(app.screen, SlotsScreen) and shown <= footer_keys(app)
        await pilot.press("f2")  # F2 closes the slots screen it opened
        assert not isinstance(app.screen, SlotsScreen)
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatListScreen), "the chat list")
        assert shown <= footer_keys(app)
        await pilot.press("f3")  # F-keys work from a modal screen
        assert isinstance(app.screen, InspectorScreen) and shown <= footer_keys(app)
        await pilot.press("f10")
        assert isinstance(app.screen, HelpScreen) and shown <= footer_keys(app)

    run(make_app(tiny_model_dir, keys={"help": "f10"}), scenario)


def test_a_theme_picked_in_the_app_is_saved(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        assert app.theme == "mlxchat-dark"
        app.theme = "mlxchat-light"
        await pilot.pause()

    config = default_config_path()
    config.parent.mkdir(parents=True)
    config.write_text('system_prompt = "Be brief."\n')
    run(make_app(tiny_model_dir), scenario)
    assert tomllib.loads(config.read_text()) == {"system_prompt": "Be brief.", "theme": "mlxchat-light"}
    assert load_settings().theme == "mlxchat-light"


def test_the_palette_goes_to_a_chat(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        await pilot.press("ctrl+p", *"go to chat 1")
        await wait_for(pilot, lambda: any(l.option_count for l in app.screen.query(CommandList)), "the matches")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.active_chat is app.chat_panes[0], "chat 1")
        assert app.focused is app.chat_panes[0].chat_input

    run(make_app(tiny_model_dir), scenario)


def test_keys_typed_right_after_ctrl_n_reach_the_new_chat(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await ready(app, pilot)
        # As a terminal delivers them: all queued before the new chat has been mounted.
        for key, character in (("ctrl+n", None), ("h", "h"), ("i", "i")):
            app.post_message(events.Key(key, character))
        await wait_for(pilot, lambda: len(app.chat_panes) == 2 and app.chat_panes[1].chat_input.text == "hi",
                       "the keys in the new chat")
        assert first.chat_input.text == ""

    run(make_app(tiny_model_dir), scenario)


def test_a_stopped_reply_s_status_line_says_idle_while_another_chat_streams(endless_model_dir: Path) -> None:
    """The status line and the tab follow a chat's own change of state at once, whatever the other chats do."""

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second, hold = await two_replies_held(app, pilot)
        assert app.active_chat is second
        await pilot.press("escape")  # stops the second chat's reply, in view; the first streams on, out of view
        hold.release()
        hold = HeldWhen(app, lambda core: core.slots[1].request is None and core.slots[0].request is not None)
        await hold.held()
        await wait_for(pilot, lambda: not second.busy, "the stop")
        assert notes(second) == ["(stopped)"] and first.busy
        await wait_for(pilot, lambda: second.status_text.startswith("slot 1 · idle"), "the stopped chat's line")
        await wait_for(pilot, lambda: app.badge(second) == "", "the stopped chat's tab")
        assert first.busy  # (still held mid-reply)
        hold.release()

    run(make_app(endless_model_dir, sampling={"max_tokens": 500}), scenario)


def test_a_terminal_below_the_smallest_supported_says_so_until_it_grows(tiny_model_dir: Path) -> None:
    from mlxchat.app.ui.screens.too_small import MIN_HEIGHT, MIN_WIDTH, TooSmallScreen

    async def main() -> None:
        app = make_app(tiny_model_dir)
        async with app.run_test(size=(60, 15)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, TooSmallScreen), "the one line")
            await pilot.pause()
            shown = str(app.screen.query_one("#too-small", Static).render())
            assert shown == f"mlxchat needs {MIN_WIDTH}×{MIN_HEIGHT} or more (now 60×15) · ctrl+q quits"
            await pilot.press("f2", "ctrl+n")  # nothing opens over it
            assert isinstance(app.screen, TooSmallScreen) and len(app.chat_panes) == 1
            await pilot.resize_terminal(MIN_WIDTH, MIN_HEIGHT)
            await wait_for(pilot, lambda: not isinstance(app.screen, TooSmallScreen), "the chats again")
            assert len(app.screen_stack) == 1 and app.focused is app.chat_panes[0].chat_input
            await pilot.resize_terminal(MIN_WIDTH - 1, MIN_HEIGHT)
            await wait_for(pilot, lambda: isinstance(app.screen, TooSmallScreen), "the line again")
            await press_to_end(app, "ctrl+q")
        assert app.return_code == 0 and not app.is_running

    asyncio.run(main())


def test_an_empty_message_is_not_sent_and_says_why(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.press("space", "enter")
        await pilot.pause()
        assert pane.chat.messages == [] and not pane.busy
        assert any("Nothing to send: the message box is empty." in str(n.message) for n in app._notifications)

    run(make_app(tiny_model_dir), scenario)
