"""Turn actions on the real engine: regenerate and edit-resend prefill only what changed; copy; export."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.chats.export import to_markdown
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.config.loading import load_settings
from tests.pilot import make_app, ready, run, send, wait_for

FIRST = "Tell me about the terminal app and the model that runs inside it"


async def two_turns(app: ChatApp, pilot: Pilot) -> None:
    pane = await ready(app, pilot)
    for text in (FIRST, "And what about the slots?"):
        await send(pilot, pane, text)
        await wait_for(pilot, lambda: not pane.busy, "a reply")


def test_regenerate_prefills_only_the_new_reply(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await two_turns(app, pilot)
        pane = app.chat_panes[0]
        before = pane.last_stats
        assert before is not None
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: not pane.busy, "the regenerated reply")
        after = pane.last_stats
        assert after is not None and after is not before
        # The same prompt as before: all of it is in the slot already (the engine re-runs at most
        # the last token to get the next one's logits).
        assert after.prompt_tokens == before.prompt_tokens
        assert after.prefilled_tokens <= 1 and after.cached_tokens == after.prompt_tokens - after.prefilled_tokens
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"] * 2
        assert len(pane.query(".user-turn")) == 2 and len(pane.query(".assistant-turn")) == 2
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and [m.text for m in saved.messages] == [m.text for m in pane.chat.messages]

    # Greedy: the same reply again, so the test shows the slot, not the sampler.
    run(make_app(tiny_model_dir), scenario)


def test_edit_and_resend_prefills_only_the_changed_message(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await two_turns(app, pilot)
        pane = app.chat_panes[0]
        first_turn = pane.chat.messages[1]
        assert first_turn.prompt_tokens is not None and first_turn.generated_tokens is not None
        await pilot.press("ctrl+g")
        assert pane.chat_input.text == "And what about the slots?"
        assert pane.query(".user-turn")[-1].has_class("-editing")
        pane.chat_input.text = "And what about the KV cache?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not pane.busy, "the reply to the edited message")
        stats = pane.last_stats
        assert stats is not None
        # Everything up to the edited message stays in the slot: the first turn and its reply.
        assert stats.cached_tokens >= first_turn.prompt_tokens + first_turn.generated_tokens - 2
        assert 0 < stats.prefilled_tokens <= 20
        assert stats.cached_tokens + stats.prefilled_tokens == stats.prompt_tokens
        texts = [m.text for m in pane.chat.messages]
        assert texts[0] == FIRST and texts[2] == "And what about the KV cache?" and len(texts) == 4
        shown = [str(w.render()) for w in pane.query(".user-turn").results(Static)]
        assert shown == [FIRST, "And what about the KV cache?"]

    run(make_app(tiny_model_dir), scenario)


def test_edit_can_be_cancelled(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.press("ctrl+g")  # nothing to edit yet: a message, no change
        assert pane.chat_input.text == ""
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        await pilot.press("ctrl+g")
        await pilot.press("ctrl+g")
        assert not pane.query(".user-turn")[-1].has_class("-editing")
        assert pane.chat_input.text == "Hello there"  # the text stays, to send or clear
        await send(pilot, pane, "A new message")  # sent after the old one, not in its place
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        assert [m.text for m in pane.chat.messages if m.role == "user"] == ["Hello there", "A new message"]

    run(make_app(tiny_model_dir), scenario)


def test_copy_and_export_the_shown_chat(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        await pilot.press("alt+c")
        reply = pane.query(".assistant-turn").results(ReplyView)
        assert app.clipboard == next(reply).text == pane.chat.messages[1].text
        await pilot.press("alt+e")
        exported = tmp_path / f"mlxchat-chat-{pane.chat.id}.md"
        assert exported.read_text() == to_markdown(pane.chat)
        assert exported.stat().st_mode & 0o777 == 0o600  # a chat is private, exported too

    run(make_app(tiny_model_dir), scenario)


def test_alt_t_shows_each_replys_timings_and_hides_them_again(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await two_turns(app, pilot)
        pane = app.chat_panes[0]
        lines = list(pane.query(".turn-timings").results(Static))
        assert len(lines) == 2 and not any(line.display for line in lines)  # hidden until asked for
        await pilot.press("alt+t")
        await pilot.pause()
        assert all(line.display for line in lines)
        assert load_settings(None, {}).show_timings  # kept in the config file for the next start
        first, second = (str(line.render()) for line in lines)
        assert first.startswith("prompt ") and "first token" in first and "tok/s" in first
        # The second turn's prompt continued the first: its slot held that part (cached from the slot).
        assert "from cache (slot)" in second
        saved = pane.chat.messages[-1]
        assert saved.cached_from == "slot" and saved.cached_tokens and saved.ttft_ms
        await pilot.press("alt+t")
        await pilot.pause()
        assert not any(line.display for line in lines)
        assert not load_settings(None, {}).show_timings

    run(make_app(tiny_model_dir), scenario)


def test_show_timings_in_the_config_shows_them_from_the_start(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "a reply")
        await pilot.pause()
        (line,) = list(pane.query(".turn-timings").results(Static))
        assert line.display and str(line.render()).startswith("prompt ")

    run(make_app(tiny_model_dir, show_timings=True), scenario)
