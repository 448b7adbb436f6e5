"""Screens of the chat pane, compared with the accepted SVGs in __snapshots__ (greedy on the tiny model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from app.chat_app import ChatApp
from tests.pilot import make_app, ready, send, steady_cursors, wait_for

SIZE = (100, 30)


def test_chat_mid_conversation(ascii_model_dir: Path, snap_compare: Any) -> None:
    """One finished turn, a second message typed and not yet sent."""
    app = make_app(ascii_model_dir, sampling={"max_tokens": 24})

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "What is a terminal?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        pane.chat_input.text = "And a shell?"
        await wait_for(pilot, lambda: "idle" in pane.status_text, "the idle status line")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
