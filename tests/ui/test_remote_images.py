"""Images in a chat with engine = "remote", through Pilot against real servers on localhost: `@shot.png` on a
llama-server that sees (a tiny image projector) is a chip and its reply is the server's own to the image's bytes; a
llama-server whose /props says it has no vision refuses it at `@`, naming its model; mlx_lm.server, which does not
say, takes the chip and refuses the message when it comes: the message stays, with the image, and the note says
what to change; with the image taken off (alt+d) the message is answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.inspector import engine_figures
from tests.engine.test_remote_images import ASKED, REPLY, png_part, servers_own
from tests.pilot import make_app, notes, ready, run, send, wait_for
from tests.servers import Server, serving_with_mlx_lm
from tests.tiny_vlms import tiny_image
from tests.ui.test_attachments import attach, chips, toasts

SEEING_MODEL = "serve a model that sees (llama-server: its --mmproj)"


@pytest.fixture
def shot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return tiny_image(folder / "shot.png", seed=4)


def remote_app(url: str) -> ChatApp:
    return make_app("", engine="remote", remote={"base_url": url, "timeout": 30}, sampling={"max_tokens": REPLY})


def chip_of(shot: Path) -> str:
    """An image's chip on a server: its pixels and size, no tokens (the server counts them)."""
    return f"@shot.png · 40×30 · {shot.stat().st_size / 1024:.1f} KiB ✕"


def test_an_image_attached_by_at_is_answered_by_a_server_that_sees(seeing_llama: Server, shot: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        assert chips(pane) == [chip_of(shot)]
        await send(pilot, pane, ASKED)
        await wait_for(pilot, lambda: not pane.busy and len(pane.chat.messages) == 2, "the reply")
        wanted, prompt = servers_own(seeing_llama.url, [png_part(shot), {"type": "text", "text": ASKED}])
        assert pane.chat.messages[1].text == wanted and pane.last_stats.prompt_tokens == prompt
        console = Console(width=200, record=True)
        console.print(engine_figures(app.session.snapshot()))  # what F3's figures show
        assert "Images its model sees (its /props: vision)" in console.export_text()

    run(remote_app(seeing_llama.url), scenario)


def test_a_server_whose_props_say_no_vision_refuses_the_image_at_at(blind_llama: Server, shot: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        assert pane.attacher.attachments == []
        assert (f"Not attached: shot.png is an image, and tiny-ascii.gguf on the llama-server at {blind_llama.url} "
                f"does not take images (its /props says it has no vision): {SEEING_MODEL}.") in toasts(app)

    run(remote_app(blind_llama.url), scenario)


def test_a_server_that_refuses_the_image_when_it_comes_keeps_the_message(ascii_model_dir: Path, shot: Path,
                                                                         tmp_path: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        assert chips(pane) == [chip_of(shot)]  # (it does not say whether its model sees: the image is offered)
        await send(pilot, pane, ASKED)
        await wait_for(pilot, lambda: not pane.busy and bool(notes(pane)), "the refusal")
        assert notes(pane) == [
            f"Not sent: tiny-ascii on the OpenAI-compatible server at {server.url} does not take images (the server "
            f"answered HTTP 404: Only 'text' content type is supported.): take the image off, or {SEEING_MODEL}"]
        # Nothing is lost: the message is back in its box with its image, and the chat has no turn.
        assert pane.chat.messages == [] and pane.chat_input.text == ASKED and chips(pane) == [chip_of(shot)]
        await pilot.press("alt+d")  # takes the image off
        pane.focus_input()
        await pilot.press("enter")
        await wait_for(pilot, lambda: not pane.busy and len(pane.chat.messages) == 2, "the reply")
        assert pane.chat.messages[0].attachments == [] and pane.chat.messages[1].text

    with serving_with_mlx_lm(ascii_model_dir, tmp_path) as server:
        run(remote_app(server.url), scenario)
