"""Tools in the app: the tiny tool model (tests/tiny_tools.py) calls `weather` on a real MCP server
(tests/mcp_server.py, over stdio); the user allows it by key, denies it, or auto_approve lets it run; the entry,
the answer after it, and the chat as saved."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.ui.widgets.tool_widgets import ToolApproval, ToolEntry
from tests.app.test_tool_servers import said
from tests.conftest import ROOT
from tests.counts import chat_counter, text_tokens
from tests.pilot import make_app, notes, ready, run, submit, wait_for
from tests.tiny_tools import ANSWER

SERVER = {"command": sys.executable, "args": ["-m", "tests.mcp_server", "stdio"], "cwd": str(ROOT)}
# The tiny model's tokenizer reads a character a token: its five tools' listing takes more than a quarter of a slot.
# These tests are of listed tools (tests/ui/test_tool_search.py is of searched ones).
LISTED = 4096


def tools_app(model: Path, **server: object) -> ChatApp:
    return make_app(model, mcp={"servers": {"test": SERVER | server},
                                         "tool_listing_max_tokens": LISTED})


async def tools_ready(app: ChatApp, pilot: Pilot) -> ChatPane:
    pane = await ready(app, pilot)
    try:
        await wait_for(pilot, lambda: bool(app.session.tools.offered_tools()), "the MCP server's tools")
    except AssertionError as e:
        servers = app.session.tools.servers
        raise AssertionError(f"{e}: {[said(s) for s in servers.states()] if servers else ''}")
    return pane


def entries(pane: ChatPane) -> list[ToolEntry]:
    return list(pane.query(ToolEntry).results(ToolEntry))


def approval(app: ChatApp) -> ToolApproval | None:
    """The approval asked, once it has the keyboard."""
    return app.focused if isinstance(app.focused, ToolApproval) else None


def answers(pane: ChatPane) -> list[str]:
    return [view.text for view in pane.query(ReplyView).results(ReplyView)]


def listing_by_transformers(model: Path, app: ChatApp) -> tuple[int, int]:
    """(tokens of an empty chat with the offered tools listed, of which the listing), counted by transformers."""
    count, empty = chat_counter(model), [{"role": "user", "content": ""}]
    whole = count(empty, app.session.tools.tool_schemas())
    return whole, whole - count(empty)


def test_the_user_allows_a_call_by_key_and_the_answer_follows(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: approval(app) is not None, "the approval")
        asked = approval(app)
        assert asked is not None and asked.planned.label == 'weather(city="Paris")'
        # The inspector's row: the slot waits on the tool, for the user.
        slot = app.session.snapshot().slots[0]
        assert (slot.state, slot.label) == ("tool", f"{pane.chat_title} · weather: your approval")
        await pilot.press("a")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (entry,) = entries(pane)
        assert entry.collapsed and entry.title.startswith('⚙ weather(city="Paris") → 18 °C and clear in Paris · ')
        assert answers(pane)[-1].strip() == ANSWER.strip()
        # Kept with the reply that made it, result and all; the answer after it.
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and [m.role for m in saved.messages] == ["user", "assistant", "assistant"]
        (call,) = saved.messages[1].tool_calls
        assert (call["name"], call["server"], call["arguments"], call["status"]) == (
            "weather", "test", {"city": "Paris"}, "done")
        assert call["result"] == "18 °C and clear in Paris" and not call["error"]
        # The entry opens on the arguments and the whole result.
        await pilot.click(entry.query_one("CollapsibleTitle"))
        await pilot.pause()
        assert not entry.collapsed

    run(tools_app(tool_model_dir), scenario)


def test_a_denied_call_goes_back_to_the_model_as_its_result(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: approval(app) is not None, "the approval")
        await pilot.press("d")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (call,) = pane.chat.messages[1].tool_calls
        assert (call["status"], call["error"], call["result"]) == ("denied", True, "the user did not allow this call")
        (entry,) = entries(pane)
        assert entry.title == '⚙ weather(city="Paris") → ✗ the user did not allow this call'
        assert "on test · denied by you" in str(entry.query_one("Contents Static").render())

    run(tools_app(tool_model_dir), scenario)


def test_auto_approve_runs_the_call_without_asking(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        assert not app.query(ToolApproval) and len(entries(pane)) == 1
        assert answers(pane)[-1].strip() == ANSWER.strip()

    run(tools_app(tool_model_dir, auto_approve=["weather"]), scenario)


def test_auto_approve_names_tools_not_their_server(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: approval(app) is not None or not pane.busy, "the approval")
        # Another tool of the same server runs unasked; weather is not listed, so its call waits for the user.
        assert approval(app) is not None and not entries(pane)
        await pilot.press("d")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        assert [c["status"] for c in pane.chat.messages[1].tool_calls] == ["denied"]

    run(tools_app(tool_model_dir, auto_approve=["long_text"]), scenario)


def test_f5_says_what_the_tool_listing_takes_of_the_slot(tool_model_dir: Path) -> None:
    from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await tools_ready(app, pilot)
        whole, listing = listing_by_transformers(tool_model_dir, app)
        assert listing > 100 and whole > listing  # five tools' schemas
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        room = str(app.screen.query_one(".settings-room").render())
        assert room == (f"Before its first message this chat takes {whole:,} tokens of its slot's 1,024: the template, "
                        f"the system prompt and the tool listing ({listing:,} of them; 5 tools offered).")

    run(tools_app(tool_model_dir), scenario)


def test_f2_warns_when_the_tool_listing_leaves_a_slot_under_the_floor(tool_model_dir: Path) -> None:
    from mlxchat.app.ui.screens.slots import SlotsScreen

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await tools_ready(app, pilot)
        whole, listing = listing_by_transformers(tool_model_dir, app)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SlotsScreen), "the slots screen")
        warnings = str(app.screen.query_one("#slots-warnings").render())
        left = 1024 - whole  # 2 slots of 2048: a slot keeps this much after the listing, under the floor of 1024
        assert (f"the system prompt and tool listing take {whole:,} tokens of each slot's 1,024 (the tools "
                f"{listing:,}): {left:,} are left for the conversation, under per_slot_floor = 1,024") in warnings

    run(tools_app(tool_model_dir), scenario)


def test_escape_while_a_call_runs_stops_it_and_the_reply(tool_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_DELAY", "60")  # (passed to the server by `env`: the call outlasts the test)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: approval(app) is not None, "the approval")
        await pilot.press("a")
        await wait_for(pilot, lambda: not app.query(ToolApproval), "the call to run")
        pane.focus_input()
        await pilot.press("escape")
        await wait_for(pilot, lambda: not pane.busy, "the reply to stop")
        (call,) = pane.chat.messages[-1].tool_calls
        assert (call["status"], call["result"]) == ("cancelled", "stopped by the user while it ran")
        assert len(entries(pane)) == 1 and len(pane.chat.messages) == 2  # no answer: the reply stopped

    run(tools_app(tool_model_dir, env=["TOOLS_WEATHER_DELAY"], auto_approve=[]), scenario)


def test_a_result_longer_than_the_slot_has_left_is_cut_with_a_note(tool_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_WORDS", "5000")  # about 40,000 characters: far more than the slot holds

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (call,) = pane.chat.messages[1].tool_calls
        assert call["result"].startswith("18 °C and clear in Paris detail0 detail1")
        note = re.search(r"\[the result was cut: ([\d,]+) characters, of which the first ([\d,]+) are shown\]$",
                         call["result"])
        assert note is not None
        whole, shown = (int(n.replace(",", "")) for n in note.groups())  # type: ignore[union-attr]
        # Cut to what the slot had left (2,560 tokens, the listing and the chat in them), counted by the model's
        # tokenizer, not to the setting's 2,048: the reply that read it kept its 64 tokens to go on.
        assert whole > 40_000 and 0 < shown < whole
        assert pane.last_stats is not None and 2560 * 0.8 < pane.last_stats.prompt_tokens  # (most of it: the result)
        assert pane.last_stats.prompt_tokens + 64 <= 2560
        # The cut result fits: the reply went on in the slot, and answered.
        assert pane.chat.messages[-1].text.strip() == "Paris is clear today."

    run(make_app(tool_model_dir, parallel=1, ctx_size=2560, mcp={"tool_listing_max_tokens": LISTED, "servers": {
        "test": SERVER | {"env": ["TOOLS_WEATHER_WORDS"], "auto_approve": ["weather"]}}}), scenario)


def shown(result: str) -> str:
    """The part of a cut result the model was given (its note off)."""
    note = re.search(r"\n\[the result was cut: [\d,]+ characters, of which the first ([\d,]+) are shown\]$", result)
    assert note is not None, result[-200:]
    return result[: int(note.group(1).replace(",", ""))]


def test_tool_result_max_tokens_cuts_a_result_the_slot_would_hold(tool_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_WORDS", "300")  # about 3,000 characters: the slot's 4,096 tokens would hold it

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (call,) = pane.chat.messages[1].tool_calls
        given = text_tokens(tool_model_dir, shown(call["result"]))
        assert 90 <= given <= 100, given  # the setting's 100 tokens, counted by the tokenizer itself
        assert pane.chat.messages[-1].text.strip() == ANSWER.strip()

    run(make_app(tool_model_dir, parallel=1, ctx_size=4096, mcp={"tool_result_max_tokens": 100, "servers": {"test": (
        SERVER | {"env": ["TOOLS_WEATHER_WORDS"], "auto_approve": ["weather"]})}}), scenario)


def test_the_room_left_is_shared_by_the_results_of_one_round(two_call_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_WORDS", "5000")  # each result far more than the slot holds

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris and in Lyon?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        paris, lyon = pane.chat.messages[1].tool_calls
        assert (paris["arguments"], lyon["arguments"]) == ({"city": "Paris"}, {"city": "Lyon"})
        given = [text_tokens(two_call_model_dir, shown(c["result"])) for c in (paris, lyon)]
        # Each took half of what the slot had left (2,560 tokens, the listing and the chat in them), so that both
        # fit: the reply went on in the slot, and answered.
        assert all(500 < n <= 2560 // 2 for n in given) and abs(given[0] - given[1]) < 20, given
        assert pane.chat.messages[-1].text.strip() == ANSWER.strip()
        # The reply kept its 64 tokens to go on: the room counted the calls' own text and the template's wrapping of
        # each result too (the prompt the reply went on from, counted by the model's template through transformers).
        went_on_from = replace(pane.chat, messages=pane.chat.messages[:2]).prompt()
        listed = [tool.function() for tool in app.session.tools.available_tools()]
        assert chat_counter(two_call_model_dir)(went_on_from, listed) + 64 <= 2560

    run(make_app(two_call_model_dir, parallel=1, ctx_size=2560, mcp={"tool_listing_max_tokens": LISTED, "servers": {"test": SERVER | {
        "env": ["TOOLS_WEATHER_WORDS"], "auto_approve": ["weather"]}}}), scenario)


def test_tool_timeout_ends_a_call_that_takes_longer_and_the_model_is_told(tool_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_DELAY", "60")  # far past the setting's half second (and the test's wait)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (call,) = pane.chat.messages[1].tool_calls
        assert (call["status"], call["error"], call["result"]) == (
            "done", True, "the call timed out after 0.5 s (tool_timeout)")
        assert pane.chat.messages[-1].text.strip() == ANSWER.strip()

    run(make_app(tool_model_dir, mcp={"tool_timeout": 0.5, "tool_listing_max_tokens": LISTED, "servers": {"test": SERVER | {
        "env": ["TOOLS_WEATHER_DELAY"], "auto_approve": ["weather"]}}}), scenario)


def test_a_reply_that_keeps_calling_stops_at_max_tool_rounds(tool_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_WEATHER_PREFIX", "again: ")  # each result has the model call the tool again

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the rounds to end")
        # Two rounds ran; the third reply's call was not run, and is kept as such (the model hears it next turn).
        assert [(m.role, len(m.tool_calls)) for m in pane.chat.messages] == [
            ("user", 0), ("assistant", 1), ("assistant", 1), ("assistant", 1)]
        statuses = [c["status"] for m in pane.chat.messages for c in m.tool_calls]
        assert statuses == ["done", "done", "not run"] and len(entries(pane)) == 3
        assert notes(pane)[-1] == ("(the reply stopped at max_tool_rounds = 2: its last calls were not run; send a "
                                   "message to go on)")

    run(make_app(tool_model_dir, mcp={"max_tool_rounds": 2, "tool_listing_max_tokens": LISTED, "servers": {
        "test": SERVER | {"env": ["TOOLS_WEATHER_PREFIX"], "auto_approve": ["weather"]}}}), scenario)


def test_f5_turns_a_tool_off_for_the_chat_and_its_reply_is_not_given_it(tool_model_dir: Path) -> None:
    from textual.widgets import SelectionList

    from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        tools = app.screen.query_one(SelectionList)
        assert set(tools.selected) == {"*test", "test/weather", "test/slow", "test/fails", "test/long_text", "test/die"}
        tools.deselect("test/weather")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert pane.chat.tools_off == ["test/weather"]
        assert [t.name for t in app.session.tools.offered_tools(pane.chat)] == ["slow", "fails", "long_text", "die"]
        # The model still calls weather (its script): the call is answered as naming no offered tool.
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the answer")
        (call,) = pane.chat.messages[1].tool_calls
        assert call["status"] == "invalid" and call["result"].startswith("there is no tool named 'weather'")
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and saved.tools_off == ["test/weather"]

    run(tools_app(tool_model_dir), scenario)


def test_two_chats_wait_on_their_calls_while_a_third_streams_and_answers(tool_model_dir: Path) -> None:
    """Chats 1 and 2 wait for the user's approval of their calls (their slots keep their KV); chat 3, whose user
    allowed the tool for it, calls it and answers meanwhile; then 1 and 2 are allowed and answer too."""

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await tools_ready(app, pilot)
        for _ in range(2):
            await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "three chats")
        panes = app.chat_panes
        waiting = lambda pane: bool(pane.query(ToolApproval))  # noqa: E731
        for pane in panes[:2]:
            await submit(pilot, pane, "What is the weather in Paris?")
            await wait_for(pilot, lambda pane=pane: waiting(pane), "its approval")
        third = panes[2]
        third.allowed_tools.add("weather")
        await submit(pilot, third, "And the weather in Paris?")
        await wait_for(pilot, lambda: not third.busy, "the third chat's answer")
        assert third.chat.messages[-1].text.strip() == ANSWER.strip()
        assert all(waiting(pane) and pane.busy for pane in panes[:2])
        # Their slots kept the conversation and the call while they waited: the rest of the round reads the result.
        for pane in panes[:2]:
            app.show_chat(pane)
            await wait_for(pilot, lambda: approval(app) is not None, "the approval in view")
            await pilot.press("a")
            await wait_for(pilot, lambda pane=pane: not pane.busy, "its answer")
            assert pane.chat.messages[-1].text.strip() == ANSWER.strip()
            assert pane.last_stats is not None and pane.last_stats.prefilled_tokens < 40
        assert first is panes[0]

    run(make_app(tool_model_dir, parallel=3, ctx_size=6144, mcp={"servers": {"test": SERVER},
                                                                          "tool_listing_max_tokens": LISTED}), scenario)
