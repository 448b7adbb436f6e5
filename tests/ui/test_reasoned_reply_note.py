"""The note under a reply that reasoned and then ended with no answer: it wrote something (its reasoning, in its
block above), so it is not told that the model wrote nothing."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app.chats.chat import Chat, ChatMessage
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.reasoning_block import ReasoningBlock
from tests.pilot import make_app, notes, ready, run


def test_a_reply_that_only_reasoned_is_not_said_to_have_written_nothing(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        chat = Chat(None, "Reasoned", messages=[
            ChatMessage("user", "Where is Paris?"),
            ChatMessage("assistant", "", "stop", reasoning="Several chats at once share one model",
                        reasoning_tokens=7, reasoning_ms=1200.0),
            ChatMessage("user", "And Rome?"),
            ChatMessage("assistant", "", "stop"),
        ])
        pane = await app.open_chat(chat)
        assert pane is not None
        await pilot.pause()
        assert len(list(pane.query(ReasoningBlock).results())) == 1
        assert notes(pane) == ["(the model ended its reply after its reasoning, with no answer)",
                               "(the model ended its reply without writing anything)"]

    run(make_app(tiny_model_dir), scenario)
