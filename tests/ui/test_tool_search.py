"""Tools at a real server's size: three servers whose 16 tools' listing takes about 7,000 tokens, against 4 slots of
2,048. The listing is deferred behind mlxchat's search tool: a chat sends "Hello" and is answered, its model (the
tiny search model, tests/tiny_tools.py) finds `weather`, calls it once the user allows it and answers from its
result, each round reading only what is new in its slot; the launch says so; F5 counts as tools are ticked."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import SelectionList, Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.conftest import ROOT
from tests.pilot import make_app, notes, ready, run, screen_lines, send, submit, wait_for
from tests.tiny_tools import ANSWER
from tests.ui.test_tools import SERVER, approval

WORDS = 76  # each generated tool's description: with it, the 16 tools' listing takes about 7,000 tokens


def many(name: str, count: int) -> dict:
    return {"command": sys.executable, "args": ["-m", "tests.many_tools_server", name, str(count), str(WORDS)],
            "cwd": str(ROOT)}


SERVERS = {"test": SERVER, "files": many("files", 6), "notes": many("notes", 5)}


def search_app(model: Path, **mcp: object) -> ChatApp:
    return make_app(model, parallel=4, ctx_size=8192, mcp={"servers": SERVERS, **mcp})


async def all_tools(app: ChatApp, pilot: Pilot) -> ChatPane:
    pane = await ready(app, pilot)
    await wait_for(pilot, lambda: len(app.session.tools.available_tools()) == 16, "the three servers' 16 tools")
    return pane


def listing_tokens(model: Path, app: ChatApp) -> int:
    """What listing the 16 tools takes, as the model's own tokenizer reads its template (transformers, not mlxchat)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    opening = [{"role": "user", "content": "Hello"}]
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}
             for t in app.session.tools.available_tools()]

    def tokens(**tools_given: object) -> int:
        text = tokenizer.apply_chat_template(opening, add_generation_prompt=True, tokenize=False, **tools_given)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return tokens(tools=tools) - tokens()


def test_sixteen_tools_are_searched_and_the_one_found_is_called_in_the_same_slot(search_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await all_tools(app, pilot)
        whole = listing_tokens(search_model_dir, app)
        assert 6_500 < whole < 7_500 and app.session.plan.per_slot == 2048  # type: ignore[union-attr]
        # The launch says which servers, how many tokens, and what is done about it.
        await wait_for(pilot, lambda: any("tool listing" in n.message for n in app._notifications), "the notice")
        (said,) = [n.message for n in app._notifications if "tool listing" in n.message]
        assert said.startswith(f"The tool listing would not fit: the 16 tools of test (5), files (6), notes (5) take "
                               f"{whole:,} tokens of a chat's slot of 2,048, over the 512 of "
                               "mcp.tool_listing_max_tokens. Each chat is given one tool to search them instead")

        await submit(pilot, pane, "Hello")
        # Round 1: the search finds `weather`, which is not offered yet in that round; round 2 calls it again.
        await wait_for(pilot, lambda: approval(app) is not None, "the approval of the call found")
        asked = approval(app)
        assert asked is not None and asked.planned.label == 'weather(city="Paris")'
        first_round = pane.chat.messages[1].tool_calls
        assert [(c["name"], c["status"]) for c in first_round] == [("search_tools", "done"), ("weather", "invalid")]
        assert first_round[0]["found"] == ["test/weather"] and '"name": "weather"' in first_round[0]["result"]
        assert first_round[1]["result"] == "there is no tool named 'weather' (offered: search_tools)"
        await pilot.press("a")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        user, *rounds, answer = pane.chat.messages
        assert (user.text, answer.text.strip()) == ("Hello", ANSWER.strip())
        second_round = rounds[1].tool_calls
        assert [(c["name"], c["status"], c["result"]) for c in second_round][1] == (
            "weather", "done", "18 °C and clear in Paris")
        # Each round read only its results: its prompt began with all the slot held, the last round's prompt and
        # reply (less the reply's end, which the template writes again).
        replies = [*rounds, answer]
        for before, after in zip(replies, replies[1:]):
            assert after.cached_tokens is not None and after.prompt_tokens is not None
            assert after.cached_tokens >= before.prompt_tokens + before.generated_tokens - 1  # type: ignore[operator]
            assert after.prompt_tokens - after.cached_tokens < 400  # (a search's result: one tool's definition)
        # The first prompt: the search tool listed, not the 16 tools.
        assert replies[0].prompt_tokens < whole // 4  # type: ignore[operator]

    run(search_app(search_model_dir), scenario)


def test_f5_at_80x24_shows_its_count_which_follows_the_ticks_and_a_server_turns_off_at_once(
        search_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await all_tools(app, pilot)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        await pilot.pause()
        form = app.screen
        room = form.query_one(".settings-room", Static)
        await pilot.pause(0.5)  # (the form scrolls to the field it focuses)
        screen = " ".join(screen_lines(app))
        for shown in ("Settings of “Chat 1”", "this chat takes", "tools offered"):  # in view when the form opens
            assert shown in screen, screen
        assert "16 tools offered, searched" in str(room.render())
        tools = form.query_one(SelectionList)
        tools.focus()
        tools.highlighted = row(tools, "test/slow")
        await pilot.press("space")
        assert "15 tools offered, searched" in str(room.render())
        tools.highlighted = row(tools, "*files")  # the server's row: all its six tools at once
        await pilot.press("space")
        assert "9 tools offered, searched" in str(room.render())
        assert not {f"files/files_{i}" for i in range(1, 7)} & set(tools.selected)
        tools.highlighted = row(tools, "*notes")
        await pilot.press("space")
        assert "4 tools offered" in str(room.render()) and "searched" not in str(room.render())  # (they fit now)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert sorted(pane.chat.tools_off) == sorted(
            ["test/slow", *(f"files/files_{i}" for i in range(1, 7)), *(f"notes/notes_{i}" for i in range(1, 6))])
        listing = app.session.tools.listing(pane.chat)
        assert not listing.deferred and len(listing.listed) == 4

    run(search_app(search_model_dir, tool_listing_max_tokens=1200), scenario, (80, 24))


def test_a_servers_tools_setting_names_the_tools_a_chat_offers_and_f5_turns_on_the_others(
        search_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await all_tools(app, pilot)
        assert [t.key for t in app.session.tools.offered_tools(pane.chat) if t.server == "files"] == ["files/files_2"]
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        tools = app.screen.query_one(SelectionList)
        assert "files/files_1" not in tools.selected and "files/files_2" in tools.selected
        tools.focus()
        tools.highlighted = row(tools, "files/files_1")
        await pilot.press("space")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert (pane.chat.tools_on, pane.chat.tools_off) == (["files/files_1"], [])
        assert [t.key for t in app.session.tools.offered_tools(pane.chat) if t.server == "files"] == [
            "files/files_1", "files/files_2"]

    servers = SERVERS | {"files": many("files", 6) | {"tools": ["files_2"]}}
    run(make_app(search_model_dir, parallel=4, ctx_size=8192, mcp={"servers": servers}), scenario)


def row(tools: SelectionList, value: str) -> int:
    """The index of the row of `value`."""
    return next(i for i in range(tools.option_count) if tools.get_option_at_index(i).value == value)


def test_a_refusal_names_the_tool_listing_where_the_message_would_fit_without_it(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.session.tools.available_tools()) == 5, "the server's tools")
        listing = listing_tokens(tool_model_dir, app)
        engine = app.session.engine
        assert engine is not None and 100 < listing < 1024 - 64
        # A message that fits the slot of 1,024 with room for the reply, but not beside the listing.
        words = 1
        while engine.count_tokens([{"role": "user", "content": "go " * (words + 1)}]) + 64 <= 1024:  # type: ignore
            words += 1
        await send(pilot, pane, "go " * words)
        await wait_for(pilot, lambda: bool(notes(pane)), "the refusal")
        (refused,) = notes(pane)
        assert refused.startswith("Not sent: this message does not fit its slot")
        assert refused.endswith(f" Or with a shorter tool listing: the 5 tools of test (5) take {listing:,} tokens of "
                                "it. Turn tools off for this chat (F5), or set mcp.tool_listing_max_tokens under "
                                f"{listing:,} to have them searched instead.")
        # Longer than the slot even without the listing: the listing is not the reason, and is not named.
        await pane.view.remove_children()
        await send(pilot, pane, "go " * 2 * words)
        await wait_for(pilot, lambda: bool(notes(pane)), "the refusal")
        assert "tool listing" not in notes(pane)[-1]

    run(make_app(tool_model_dir, mcp={"servers": {"test": SERVER}, "tool_listing_max_tokens": 4096}), scenario)


def test_the_listing_notice_comes_again_after_a_model_switch(search_model_dir: Path, tool_model_dir: Path) -> None:
    from tests.ui.test_model_switch import pick_typed

    def said(app: ChatApp) -> list[str]:
        return [n.message for n in app._notifications if n.message.startswith("The tool listing would not fit")]

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await all_tools(app, pilot)
        await wait_for(pilot, lambda: len(said(app)) == 1, "the notice at launch")
        await pick_typed(app, pilot, str(tool_model_dir))
        await wait_for(pilot, lambda: app.session.model_name == "tiny-tools", "the switch")
        await wait_for(pilot, lambda: len(said(app)) == 2, "the notice after the switch")

    run(search_app(search_model_dir), scenario)
