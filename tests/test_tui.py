"""The chat app, driven with Pilot on the tiny generated model: start-up, chats, streaming, stop, refusal."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Markdown, Static

from app.chat_app import ChatApp
from app.chat_pane import ChatInput
from app.loading_screen import LoadingScreen
from tests.pilot import make_app, notes, ready, run, send, submit, wait_for


def test_opens_with_one_focused_chat(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        assert len(app.chat_panes) == 1
        assert isinstance(app.focused, ChatInput) and app.focused is pane.chat_input
        assert app.plan is not None and app.plan.per_slot == 1024
        await wait_for(pilot, lambda: "1024 tokens" in pane.status_text, "the status line")

    run(make_app(tiny_model_dir), scenario)


def test_reply_streams_to_done(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello, how are you today?")
        assert pane.chat_input.text == ""
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"]
        reply = pane.query_one(".assistant-turn", Markdown)
        assert reply.source == pane.chat.messages[1].text != ""

    run(make_app(tiny_model_dir), scenario)


def test_two_chats_stream_at_once(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        second = app.chat_panes[1]
        assert (first.slot_id, second.slot_id) == (0, 1)
        assert app.focused is second.chat_input
        await pilot.press("alt+1")
        assert app.active_chat is first and app.focused is first.chat_input
        await pilot.press("alt+2")
        assert app.active_chat is second
        await submit(pilot, second, "The quick brown fox")
        await submit(pilot, first, "Tell me about the terminal app")
        overlapped = False

        def both_done() -> bool:
            nonlocal overlapped
            overlapped |= first.busy and second.busy
            return not first.busy and not second.busy

        await wait_for(pilot, both_done, "both replies")
        assert overlapped, "the two replies never streamed at the same time"
        for pane in (first, second):
            # Batched numerics may end the random tiny model's reply at once: any clean end counts.
            assert not [n for n in notes(pane) if n.startswith(("Error", "Not sent"))]
        # With both slots taken, a third chat is refused with a message instead of a pane.
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert len(app.chat_panes) == 2
        # Closing a chat frees its slot for the next one.
        await pilot.press("ctrl+w")
        await wait_for(pilot, lambda: len(app.chat_panes) == 1, "the chat to close")
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "a chat on the freed slot")
        assert sorted(p.slot_id for p in app.chat_panes) == [0, 1]

    # Both prompts get replies of about 700 tokens from the tiny model: long enough to overlap.
    run(make_app(tiny_model_dir, sampling={"max_tokens": 1000}), scenario)


def test_escape_stops_a_reply_and_keeps_it(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await submit(pilot, pane, "Tell me about the terminal app")
        await wait_for(pilot, lambda: bool(pane.query_one(".assistant-turn", Markdown).source), "reply text")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not pane.busy, "the stop")
        assert notes(pane) == ["(stopped)"]
        assert pane.chat.messages[-1].role == "assistant" and pane.chat.messages[-1].text

    # A reply that could run to the end of a 4096-token slot: the stop comes long before.
    run(make_app(tiny_model_dir, parallel=1, ctx_size=4096, sampling={"max_tokens": 4096}), scenario)


def test_overflowing_message_is_refused_and_stays_in_the_input(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        text = "The user asks a question and the assistant answers it. " * 40
        await send(pilot, pane, text)
        await wait_for(pilot, lambda: not pane.busy, "the refusal")
        assert pane.chat_input.text == text
        assert pane.chat.messages == []
        assert not pane.query(".user-turn")
        (note,) = notes(pane)
        assert note.startswith("Not sent:") and "holds 256" in note

    run(make_app(tiny_model_dir, ctx_size=512), scenario)


def test_bad_model_path_shows_what_to_change(tmp_path: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.failed, "the failure")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, LoadingScreen)
        problem = str(screen.query_one("#loading-problem", Static).render())
        remedy = str(screen.query_one("#loading-remedy", Static).render())
        assert "no-such-model" in problem
        assert "--model" in remedy
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_code == 1

    run(make_app(tmp_path / "no-such-model"), scenario)


def test_refused_slot_plan_says_what_to_change(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.failed, "the failure")
        await pilot.pause()
        problem = str(app.screen.query_one("#loading-problem", Static).render())
        remedy = str(app.screen.query_one("#loading-remedy", Static).render())
        assert "1024 / 8 = 128 tokens per slot is below the minimum of 256" in problem
        assert "--parallel" in remedy
        assert app.engine is None

    run(make_app(tiny_model_dir, parallel=8, ctx_size=1024), scenario)
