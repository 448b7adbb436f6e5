"""The notes of a refusal: one that no longer holds goes once a message is sent, and a reply that cannot go on after
its tool results says so, rather than "Not sent" about a message that was."""

from __future__ import annotations

import re
from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, notes, ready, run, send, submit, wait_for
from tests.ui.test_tools import LISTED, SERVER, tools_ready


def test_an_old_refusal_goes_once_a_message_is_sent(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there " * 600)  # (far more than the slot's 1,024 tokens)
        assert [n for n in notes(pane) if n.startswith("Not sent: this message does not fit its slot")]
        await send(pilot, pane, "Hello")
        await wait_for(pilot, lambda: not pane.busy and len(pane.chat.messages) == 2, "the reply")
        assert not [n for n in notes(pane) if n.startswith("Not sent")]

    run(make_app(tiny_model_dir), scenario)


def test_a_reply_whose_tool_results_leave_no_room_says_it_cannot_go_on(tool_model_dir: Path, monkeypatch) -> None:
    # Each result has the model call again, and is far longer than the slot: each is cut to what the slot has left,
    # until the note saying so is more than the room the slot keeps for the reply to go on.
    monkeypatch.setenv("TOOLS_WEATHER_PREFIX", "again: ")
    monkeypatch.setenv("TOOLS_WEATHER_WORDS", "5000")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the rounds to end")
        said = notes(pane)[-1]
        assert re.fullmatch(r"The reply cannot go on: with its tool results the chat takes 1,\d{3} tokens, over its "
                            r"slot's 1,024\. The results are kept: start a new chat, fork this one at an earlier "
                            r"message \(F8\), or give each slot more room \(F2\)\.", said), said
        assert not [n for n in notes(pane) if n.startswith("Not sent")]
        assert pane.chat.messages[0].role == "user" and pane.chat_input.text == ""  # (the message stays sent)
        assert pane.chat.messages[-1].tool_calls[0]["status"] == "done"  # (and the results it got)

    # (the listing kept whole: this is about results that do not fit, not about a listing searched instead)
    run(make_app(tool_model_dir, parallel=1, ctx_size=1024, mcp={"max_tool_rounds": 50, "tool_listing_max_tokens": LISTED,
                                                                "servers": {"test": SERVER | {
        "env": ["TOOLS_WEATHER_PREFIX", "TOOLS_WEATHER_WORDS"], "auto_approve": ["weather"]}}}), scenario)


def test_the_advice_on_a_message_too_long_offers_only_what_can_be_done(tiny_model_dir: Path) -> None:
    """The tiny model was trained on 4,096 tokens: no slot can be larger, so no bigger slot is offered."""
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert app.session.facts is not None and app.session.facts.trained_ctx == 4096
        await send(pilot, pane, "Hello there " * 2500)
        (said,) = [n for n in notes(pane) if n.startswith("Not sent")]
        assert re.fullmatch(r"Not sent: this message does not fit its slot: the chat would take [\d,]+ tokens and 64 "
                            r"more for the reply, [\d,]+ over the slot's 1,024\. No slot can hold it: the model was "
                            r"trained on 4,096 tokens\. Start a new chat, or send less\.", said), said

    run(make_app(tiny_model_dir), scenario)
