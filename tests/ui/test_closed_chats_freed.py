"""Closed chats, closed dialogs and the footer's replaced keys are freed: nothing the app keeps holds
on to their widgets."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.fan_out import FanOutScreen
from mlxchat.app.ui.workarounds.freed_widgets import FreedTextArea
from tests.pilot import make_app, open_second_chat, ready, run, send, wait_for


def test_a_closed_chat_and_a_closed_dialog_are_freed(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        _, second = await open_second_chat(app, pilot)
        await send(pilot, second, "Hello there")
        await wait_for(pilot, lambda: not second.busy, "the reply")
        # (the chat, its message box and its file filter: each was kept by its screen's text-selection signal)
        closed = [weakref.ref(second), weakref.ref(second.chat_input), weakref.ref(second.query_one("#picker-filter"))]
        await app.close_chat(second)
        del second
        await pilot.press("ctrl+n")  # (Textual lists the shown tabs again when they change)
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "a new chat")
        await pilot.press("f6")
        await wait_for(pilot, lambda: isinstance(app.screen, FanOutScreen), "the fan-out form")
        closed.append(weakref.ref(app.screen.query_one(FreedTextArea)))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FanOutScreen), "the form to close")

        def freed() -> bool:
            gc.collect()  # (a timer scheduled meanwhile may hold a widget in its context for a moment)
            return [ref() for ref in closed] == [None] * len(closed)

        await wait_for(pilot, freed, "the closed chat and dialog to be freed")
        # The footer makes its keys anew at each change of focus (about 30 each time): they do not pile up.
        before = footer_keys_alive()
        for _ in range(5):
            await pilot.press("alt+1", "alt+2")
        await pilot.pause()
        assert footer_keys_alive() <= before + len(app.screen.query(FooterKey)), "replaced footer keys are alive"

    run(make_app(tiny_model_dir, parallel=2), scenario)


def footer_keys_alive() -> int:
    gc.collect()
    return sum(isinstance(o, FooterKey) for o in gc.get_objects())
