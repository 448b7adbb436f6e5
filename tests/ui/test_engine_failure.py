"""The chat UI on models as users have them: a Llama-3-RoPE model replies, and a failure in the engine reaches the pane."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, notes, ready, run, send, wait_for
from tests.tiny_families import save_family


@pytest.fixture(scope="module")
def llama3_rope_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model shaped like every Llama 3.1 / 3.2 on mlx-community (rope_type "llama3")."""
    return save_family("llama3_rope", tmp_path_factory.mktemp("llama3") / "llama3-rope")


def test_a_llama3_rope_model_replies_in_the_app(llama3_rope_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]
        assert pane.chat.messages[1].text, "an empty reply"
        assert not [n for n in notes(pane) if n.startswith("Error")]

    run(make_app(llama3_rope_dir), scenario)


def test_a_reply_that_fails_in_the_engine_shows_the_error_and_keeps_the_message(tiny_model_dir: Path) -> None:
    """A layer that raises on the engine's thread (injected into the real model): the pane says so, the
    message stays in the chat, and ctrl+r writes the reply once the layer works again."""
    import mlx.nn as nn

    class Failing(nn.Module):
        def __call__(self, *args, **kwargs):
            raise RuntimeError("the layer failed (injected by the test)")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        engine = app.session.engine
        layer = engine.core.model.model.layers[0]
        working = layer.self_attn
        engine.call(lambda: setattr(layer, "self_attn", Failing())).result(10)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "the failed reply")
        # (The CPU llama path reads the layer's attributes before it calls it: either failure will do.)
        assert any(n.startswith("Error: ") and ("injected" in n or "Failing" in n) for n in notes(pane)), notes(pane)
        assert [m.role for m in pane.chat.messages][:1] == ["user"]
        assert pane.chat.messages[0].text == "Hello there"
        assert engine.snapshot().slots[0].state == "idle"

        engine.call(lambda: setattr(layer, "self_attn", working)).result(10)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: not pane.busy and pane.chat.messages[-1].role == "assistant", "the retry")
        assert pane.chat.messages[-1].text
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]

    run(make_app(tiny_model_dir), scenario)
