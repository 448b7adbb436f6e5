"""Screens of a chat with a reasoning model (tests/tiny_reasoning.py): the block open while the reply reasons,
and folded under its header once the answer has come.

The durations are the engine's measurements: the speed and the time reasoned are fixed here (12.5 tok/s,
12.4 s), so that the screens are the same on every machine."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.widgets.reasoning_block import ReasoningBlock
from tests.markers import needs_cpu
from tests.pilot import HeldWhen, make_app, ready, steady_cursors, submit, wait_for
from tests.ui.test_chat_snapshots import SIZE, converse
from tests.ui.test_reasoning import reasoning_so_far

# The accepted screens hold replies of random-weight models as the CPU computes them, and this machine's
# figures: a GPU writes other tokens.
pytestmark = needs_cpu


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlxchat.engine.slots.Request.decode_tok_s", lambda self: 12.5)
    monkeypatch.setattr("mlxchat.engine.reply_parts.ReplySplit.reasoning_s", property(lambda self: 12.4))


def test_the_block_open_while_the_reply_reasons(reasoning_model, snap_compare: Any) -> None:
    app = make_app(reasoning_model("switch"))

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        hold = HeldWhen(app, reasoning_so_far(3))  # held until the app quits, after the screenshot
        await submit(pilot, pane, "Where is Paris?")
        await hold.held()
        await wait_for(pilot, lambda: any(b.text == "Several chats at" for b in pane.query(ReasoningBlock)),
                       "the reasoning so far")
        await wait_for(pilot, lambda: "thinking" in pane.status_text, "the status line")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_the_block_folded_once_the_answer_came(reasoning_model, snap_compare: Any) -> None:
    app = make_app(reasoning_model("switch"))

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await converse(app, pilot, pane, "Where is Paris?")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
