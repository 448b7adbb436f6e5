"""The chat app with engine = "remote", driven with Pilot against a real mlx_lm.server on localhost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.inspector import InspectorScreen, engine_figures
from mlxchat.app.ui.screens.loading import LoadingScreen
from tests.pilot import make_app, notes, open_second_chat, ready, run, submit, wait_for
from tests.servers import Server, free_port, mlx_lm_server, running, serving_with_mlx_lm


@pytest.fixture(scope="module")
def mlx_server(endless_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_with_mlx_lm(endless_model_dir, tmp_path_factory.mktemp("mlx-server")) as server:
        yield server


def remote_app(url: str, max_tokens: int = 32) -> ChatApp:
    return make_app("", engine="remote", remote={"base_url": url, "timeout": 10},
                    sampling={"max_tokens": max_tokens})


def test_chats_stream_from_the_server_and_the_inspector_says_whose_slots(
    mlx_server: Server, endless_model_dir: Path
) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        assert app.session.plan is not None and app.session.plan.parallel == 2
        assert app.sub_title == f"{endless_model_dir.name} · OpenAI-compatible server: 2 slots, context not reported"
        await submit(pilot, first, "Hello, how are you today?")
        await submit(pilot, second, "The quick brown fox")
        await wait_for(pilot, lambda: not first.busy and not second.busy, "both replies")
        for pane in (first, second):
            assert [m.role for m in pane.chat.messages] == ["user", "assistant"]
            assert pane.chat.messages[1].text and pane.chat.messages[1].finish_reason == "length"
            assert notes(pane) == ["(the reply reached max_tokens = 32)"]
        await wait_for(pilot, lambda: "idle" in first.status_text, "the status line")
        assert first.status_text.startswith("slot 0 · idle · ") and " / ? tokens" in first.status_text
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, InspectorScreen), "the inspector")
        assert app.session.engine is not None
        console = Console(width=200, record=True)
        console.print(engine_figures(app.session.engine.snapshot()))  # what the inspector's figures show
        figures = console.export_text()
        assert f"OpenAI-compatible server at {mlx_server.url}" in figures
        assert "no /props or /slots" in figures
        await pilot.press("escape")
        # F2 cannot re-divide a server's slots: it says so rather than offer a slider.
        await pilot.press("f2")
        await pilot.pause()
        assert not isinstance(app.screen, InspectorScreen) and len(app.screen_stack) == 1

    run(remote_app(mlx_server.url), scenario)


def test_a_server_that_is_down_at_start_says_what_to_do() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.failed, "the start-up failure")
        assert isinstance(app.screen, LoadingScreen)
        shown = " ".join(str(s.render()) for s in app.screen.query(Static).results(Static))
        assert f"cannot reach the server at {url}" in shown and "[remote] table" in shown

    run(remote_app(url), scenario)


def test_server_killed_mid_reply_keeps_the_message_and_ctrl_r_retries(endless_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    command, env = mlx_lm_server(endless_model_dir, port, tmp_path)
    log = tmp_path / "server.log"

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await submit(pilot, pane, "Hello, how are you today?")
        await wait_for(pilot, lambda: len(pane.reply_text) > 20, "some of the reply")
        server.kill()
        await wait_for(pilot, lambda: not pane.busy, "the reply's end")
        user, reply = pane.chat.messages
        assert user.text == "Hello, how are you today?"
        assert reply.finish_reason == "error" and len(reply.text) > 20  # what came is kept, and saved
        [note] = notes(pane)
        assert note.startswith(f"Error: the server at {server.url} stopped sending before the reply ended")
        # Sending again while it is down: a clear error, the message kept, nothing hangs.
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: not pane.busy, "the retry's end")
        assert [m.role for m in pane.chat.messages] == ["user"]
        assert "cannot reach the server" in notes(pane)[-1]
        with running(command, port, log, env):
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: not pane.busy, "the retried reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]
        assert pane.chat.messages[1].finish_reason == "length" and pane.chat.messages[1].text
        assert notes(pane) == ["(the reply reached max_tokens = 1500)"]

    with running(command, port, log, env) as server:
        run(remote_app(server.url, max_tokens=1500), scenario)
