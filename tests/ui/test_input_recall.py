"""↑/↓ in the message box: this chat's earlier prompts from the first/last line, the draft kept, lines walked; alt+x
empties the box."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from tests.pilot import from_terminal, make_app, open_second_chat, ready, run, send, wait_for

PROMPTS = ("first prompt", "second prompt\non two lines", "third prompt")


def test_up_and_down_walk_this_chats_prompts_and_come_back_to_the_draft(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane, other = await open_second_chat(app, pilot)
        await pilot.press("alt+1")
        for prompt in PROMPTS:
            await send(pilot, pane, prompt)
            await wait_for(pilot, lambda: not pane.busy, "a reply")
        box = pane.chat_input
        assert box.text == "" and app.focused is box
        await pilot.press(*"draft")

        await pilot.press("up")
        assert (box.text, box.cursor_location) == ("third prompt", (0, 12))
        await pilot.press("up")  # a prompt of two lines: shown with the cursor on its first
        assert box.text == "second prompt\non two lines" and box.cursor_location[0] == 0
        await pilot.press("up")
        assert box.text == "first prompt"
        await pilot.press("up")  # the oldest: the key moves the cursor as usual
        assert (box.text, box.cursor_location) == ("first prompt", (0, 0))

        await pilot.press("down")
        assert box.text == "second prompt\non two lines" and box.cursor_location == (1, 12)
        await pilot.press("up")  # not on the first line: the cursor moves up, nothing is recalled
        assert box.text == "second prompt\non two lines" and box.cursor_location[0] == 0
        await pilot.press("down", "down")  # the second line, then the next prompt
        assert box.text == "third prompt"
        await pilot.press("!")  # a recalled prompt changed is kept while walking
        await pilot.press("up", "down", "down")  # back, its second line, forward again
        assert box.text == "third prompt!"
        await pilot.press("down")
        assert (box.text, box.cursor_location) == ("draft", (0, 5))  # what was being typed, kept
        await pilot.press("down")
        assert box.text == "draft"

        await pilot.press("alt+2")  # another chat has its own prompts: none yet
        assert app.focused is other.chat_input
        await pilot.press("up")
        assert other.chat_input.text == ""

    run(make_app(tiny_model_dir, sampling={"max_tokens": 4}), scenario)


def test_a_draft_of_several_lines_is_walked_before_anything_is_recalled(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "earlier")
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        box = pane.chat_input
        await pilot.press(*"one", "ctrl+j", *"two", "ctrl+j", *"three")
        await pilot.press("up", "up")
        assert box.text == "one\ntwo\nthree" and box.cursor_location[0] == 0
        await pilot.press("up")
        assert box.text == "earlier"
        await pilot.press("down")
        assert box.text == "one\ntwo\nthree" and box.cursor_location == (2, 5)
        await pilot.press("enter")  # sending ends the walk: the next ↑ starts from the newest again
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        await pilot.press("up")
        assert box.text == "one\ntwo\nthree"

    run(make_app(tiny_model_dir, sampling={"max_tokens": 4}), scenario)


def test_alt_x_empties_the_message_box_and_ctrl_z_brings_it_back(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        pane.chat_input.text = "a long draft\nover two lines"
        pane.focus_input()
        await from_terminal(app, pilot, "\x1bx")  # alt+x, as a terminal sends it
        assert pane.chat_input.text == ""
        await pilot.press("ctrl+z")
        assert pane.chat_input.text == "a long draft\nover two lines"

    run(make_app(tiny_model_dir), scenario)
