"""Driving the real chat app with Pilot on the tiny generated model: start, send, wait."""

from __future__ import annotations

import asyncio
import html
import re
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from textual import events
from textual._xterm_parser import XTermParser
from textual.pilot import Pilot
from textual.widgets import Input, Static, TextArea

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_pane import ChatInput, ChatPane
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.config.loading import load_settings

TIMEOUT_S = 60.0


def make_app(model: Path | str, **overrides: Any) -> ChatApp:
    """The real app on `model`, greedy, with the slot settings in `overrides`."""
    sampling = {"temperature": 0, "max_tokens": 64, **overrides.pop("sampling", {})}
    settings = load_settings(None, {"model": str(model), "parallel": 2, "ctx_size": 2048, **overrides,
                                    "sampling": sampling})
    return ChatApp(settings)


async def wait_for(pilot: Pilot, condition: Callable[[], bool], what: str) -> None:
    """Lets the app run until `condition` holds; fails after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


async def press_to_end(app: ChatApp, key: str) -> None:
    """Presses `key`, which ends the app, and waits (a bounded while, not through Pilot) until the app has begun to
    end: Pilot.press also waits for the app's animations to complete, which an app that has ended may never do (a
    clean-clone run hung there, in test_confirm_quit_off_quits_at_once)."""
    app.post_message(events.Key(key, None))
    deadline = time.monotonic() + TIMEOUT_S
    while app.return_code is None:
        assert time.monotonic() < deadline, f"timed out waiting for {key} to end the app"
        await asyncio.sleep(0.02)


def run(app: ChatApp, scenario: Callable[[ChatApp, Pilot], Awaitable[None]], size: tuple[int, int] = (100, 32)) -> None:
    """Runs `scenario` against `app` in a headless terminal of `size` (columns, rows)."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await scenario(app, pilot)

    asyncio.run(main())


async def ready(app: ChatApp, pilot: Pilot) -> ChatPane:
    """Waits for the engine and the first chat, its box given the keyboard (the end of its opening); returns it."""
    await wait_for(pilot, lambda: bool(app.session.engine and app.chat_panes and isinstance(app.focused, ChatInput)),
                   "the first chat")
    await pilot.pause()
    return app.chat_panes[0]


async def send(pilot: Pilot, pane: ChatPane, text: str) -> None:
    """Types `text` in the pane's input and presses Enter.

    Pilot's press returns only once the app is idle, that is after the whole reply: a test that
    needs to act while a reply streams posts the input's Submitted message itself (`submit`).
    """
    pane.chat_input.text = text
    pane.focus_input()
    await pilot.press("enter")
    await pilot.pause()


async def from_terminal(app: ChatApp, pilot: Pilot, data: str) -> None:
    """Sends `data` as a terminal's bytes arrive: read by Textual's own parser (alt+c comes as a printable
    "c" with alt, not as pilot.press makes it), each key then handled by the app."""
    parser = XTermParser()
    for event in [*parser.feed(data), *parser.feed("")]:  # (the empty feed ends a lone escape)
        app.post_message(event)
    await pilot.pause()


async def submit(pilot: Pilot, pane: ChatPane, text: str) -> None:
    """Sends `text` from the pane's input as Enter does, without waiting for the reply."""
    def sent() -> int:
        return sum(m.role == "user" and m.text == text for m in pane.chat.messages)

    before = sent()
    pane.chat_input.text = text
    pane.chat_input.post_message(ChatInput.Submitted(text))
    # (or already answered: a short reply can start and end between two looks)
    await wait_for(pilot, lambda: pane.busy or sent() > before, "the request")


def rendered_prompt(app: ChatApp, slot: int = 0) -> str:
    """The prompt of the request on `slot`, as the engine rendered it and the slot read it, as text."""
    core = app.session.engine.core  # type: ignore[union-attr]
    return core.tokenizer.decode(core.slots[slot].request.prompt)


def slot_read(app: ChatApp, slot: int = 0) -> str:
    """What `slot` holds the KV of (the prompt it read and the reply after it), as text, once its reply ended."""
    core = app.session.engine.core  # type: ignore[union-attr]
    return core.tokenizer.decode(core.slots[slot].history)


def notes(pane: ChatPane) -> list[str]:
    """The texts of the notes under the pane's replies (stopped, refused, errors)."""
    return [str(note.render()) for note in pane.query(".turn-note").results(Static)]


def screen_lines(app: ChatApp) -> list[str]:
    """The screen's text as the terminal shows it, a line each (from Textual's SVG screenshot, which writes each
    line's text in pieces)."""
    lines: dict[str, str] = {}
    pieces = r'clip-path="url\(#terminal-\d+-line-(\d+)\)">([^<]*)</text>'
    for line, text in re.findall(pieces, app.export_screenshot()):
        lines[line] = lines.get(line, "") + html.unescape(text).replace("\xa0", " ")
    return [" ".join(text.split()) for _, text in sorted(lines.items(), key=lambda i: int(i[0]))]


def steady_cursors(app: ChatApp) -> None:
    """Stops the text cursors blinking, so that a screenshot does not depend on when it is taken."""
    for box in [*app.query(TextArea).results(TextArea), *app.query(Input).results(Input)]:
        box.cursor_blink = False


async def open_second_chat(app: ChatApp, pilot: Pilot) -> tuple[ChatPane, ChatPane]:
    """Waits for the first chat, opens a second with ctrl+n; returns both."""
    first = await ready(app, pilot)
    await pilot.press("ctrl+n")
    await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
    return first, app.chat_panes[1]


def hold_engine(app: ChatApp, timeout: float = TIMEOUT_S) -> Callable[[], None]:
    """Holds the engine thread between two steps until the app shuts its session down, or the returned
    function is called, so that a test catches the panes as they are (queued, badged) rather than mid-stream."""
    engine = app.session.engine
    assert engine is not None
    release, held = threading.Event(), threading.Event()
    engine.call(lambda: (held.set(), release.wait(timeout)))
    assert held.wait(timeout)
    shutdown = app.session.shutdown
    app.session.shutdown = lambda: (release.set(), shutdown())  # type: ignore[method-assign]
    return release.set


class HeldWhen:
    """The engine, to be held after the first step at whose end `ready(scheduler)` holds (a reply has streamed so
    far, say): set up before the test sends, awaited with `held()`, let go with `release()` (or when the app shuts
    its session down, or the engine itself: a model switch retires it). What the test does meanwhile finds the engine
    exactly there, on any machine."""

    def __init__(self, app: Any, ready: Callable[[Any], bool], timeout: float = TIMEOUT_S) -> None:
        engine = app.session.engine
        assert engine is not None
        core, self._release, self._held = engine.core, threading.Event(), threading.Event()
        step = core.step

        def step_then_check() -> Any:
            result = step()
            if not self._held.is_set() and ready(core):
                self._held.set()
                self._release.wait(timeout)
            return result

        core.step = step_then_check  # type: ignore[method-assign]
        stop = engine.shutdown
        engine.shutdown = lambda *args, **kwargs: (self._release.set(), stop(*args, **kwargs))
        shutdown = app.session.shutdown
        app.session.shutdown = lambda: (self._release.set(), shutdown())  # type: ignore[method-assign]

    async def held(self) -> None:
        """Lets the app run until the engine is held."""
        deadline = time.monotonic() + TIMEOUT_S
        while not self._held.is_set():
            assert time.monotonic() < deadline, "timed out waiting for the engine to be held"
            await asyncio.sleep(0.02)

    def release(self) -> None:
        self._release.set()


async def reply_held(app: ChatApp, pilot: Pilot, text: str, tokens: int) -> tuple[ChatPane, ReplyView, HeldWhen]:
    """The first chat's reply to `text`, held once it wrote `tokens` tokens and its text is on screen (let go with the
    hold's release)."""
    pane = await ready(app, pilot)
    hold = HeldWhen(app, lambda core: core.slots[0].request and core.slots[0].request.generated >= tokens)
    await submit(pilot, pane, text)
    await hold.held()
    reply = pane.query_one(ReplyView)
    await wait_for(pilot, lambda: bool(reply.text.strip()), "the reply's first words on screen")
    return pane, reply, hold


async def two_replies_held(app: ChatApp, pilot: Pilot) -> tuple[ChatPane, ChatPane, HeldWhen]:
    """Two chats (the second shown) whose replies are held half-written: the engine stops once both wrote two
    tokens, until the returned hold is released."""
    first, second = await open_second_chat(app, pilot)
    hold = HeldWhen(app, lambda core: all(s.request and s.request.generated >= 2 for s in core.slots[:2]))
    await submit(pilot, first, "Tell me about the terminal app")
    await submit(pilot, second, "The quick brown fox")
    await hold.held()
    return first, second, hold
