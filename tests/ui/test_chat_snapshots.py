"""Screens of the chats and the help, compared with the accepted SVGs in __snapshots__.

Greedy decoding on the ASCII tiny model, so the replies are the same on every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.markers import needs_cpu
from tests.pilot import make_app, ready, send, steady_cursors, wait_for

# The accepted screens hold replies of random-weight models as the CPU computes them, and this machine's
# figures: a GPU writes other tokens.
pytestmark = needs_cpu

SIZE = (100, 30)


async def converse(app: ChatApp, pilot: Pilot, pane: ChatPane, text: str) -> None:
    """Sends `text` from `pane` and waits until its reply is done and its status line idle."""
    await send(pilot, pane, text)
    await wait_for(pilot, lambda: not pane.busy, "the reply")
    await wait_for(pilot, lambda: "idle" in pane.status_text and "tokens" in pane.status_text, "the status line")


def mid_conversation(app: ChatApp) -> Any:
    """One finished turn, a second message typed and not yet sent."""

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await converse(app, pilot, pane, "What is a terminal?")
        pane.chat_input.text = "And a shell?"
        steady_cursors(app)

    return run_before


def test_chat_mid_conversation(ascii_model_dir: Path, snap_compare: Any) -> None:
    app = make_app(ascii_model_dir, sampling={"max_tokens": 24})
    assert snap_compare(app, terminal_size=SIZE, run_before=mid_conversation(app))


def test_chat_at_80x24(ascii_model_dir: Path, snap_compare: Any) -> None:
    """The smallest terminal supported: the footer shows the keys it has room for, whole."""
    app = make_app(ascii_model_dir, sampling={"max_tokens": 24})
    assert snap_compare(app, terminal_size=(80, 24), run_before=mid_conversation(app))


def test_chat_in_the_light_theme(ascii_model_dir: Path, snap_compare: Any) -> None:
    app = make_app(ascii_model_dir, theme="mlxchat-light", sampling={"max_tokens": 24})
    assert snap_compare(app, terminal_size=SIZE, run_before=mid_conversation(app))


def test_grid_of_three_chats(ascii_model_dir: Path, snap_compare: Any) -> None:
    """Three chats side by side, two with a finished reply; the third has the keyboard."""
    app = make_app(ascii_model_dir, parallel=4, ctx_size=4096, sampling={"max_tokens": 12})

    async def run_before(pilot: Pilot) -> None:
        first = await ready(app, pilot)
        await converse(app, pilot, first, "Hello, how are you today?")
        for _ in range(2):
            await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "three chats")
        await converse(app, pilot, app.chat_panes[1], "The quick brown fox")
        await pilot.press("alt+3")
        await pilot.press("f4")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_help_screen(ascii_model_dir: Path, snap_compare: Any) -> None:
    app = make_app(ascii_model_dir)

    async def run_before(pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("f1")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_chat_settings_form(ascii_model_dir: Path, snap_compare: Any) -> None:
    """F5 on a chat, scrolled to its speculative decoding: "draft" greyed, with why (no draft model is loaded)."""
    app = make_app(ascii_model_dir)

    async def run_before(pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("f5")
        await pilot.pause()
        app.screen.query_one("#speculative").focus()  # (as tab would: the form scrolls it into view)
        await pilot.pause()
        steady_cursors(app)

    assert snap_compare(app, terminal_size=(100, 40), run_before=run_before)
