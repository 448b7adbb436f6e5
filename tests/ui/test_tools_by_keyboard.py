"""Tools from the keyboard: the tool calls of the last reply open and fold with a key, and the help (F1) names the
keys of a call waiting for approval and what F5 does with tools."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Label

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.help import HelpScreen
from tests.pilot import run, submit, wait_for
from tests.ui.test_tools import entries, tools_app, tools_ready
from tests.ui.test_tui import help_lines


def test_the_last_replys_tool_calls_open_and_fold_with_a_key(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await tools_ready(app, pilot)
        await submit(pilot, pane, "What is the weather in Paris?")
        await wait_for(pilot, lambda: not pane.busy and len(entries(pane)) == 1, "the answer")
        (entry,) = entries(pane)
        assert entry.collapsed and pane.chat_input.has_focus
        await pilot.press("alt+o")
        await pilot.pause()
        assert not entry.collapsed
        await pilot.press("alt+o")
        await pilot.pause()
        assert entry.collapsed

    run(tools_app(tool_model_dir, auto_approve=["weather"]), scenario)


def test_the_help_names_the_keys_of_a_call_and_what_f5_does_with_tools(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await tools_ready(app, pilot)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        text = " ".join(" ".join(help_lines(app.screen)).split())  # type: ignore[arg-type]
        titles = [str(label.render()) for label in app.screen.query(".help-title").results(Label)]
        assert "A tool call waiting for your approval (in the chat)" in titles
        for key, does in (("a", "Allow once"), ("t", "Allow in this chat"), ("d", "Deny"),
                          ("escape", "Stop the reply"), ("alt+o", "Open the tool calls of this chat's last reply")):
            assert f"{key} " in text and does in text
        assert "the tools its replies may call" in text

    run(tools_app(tool_model_dir), scenario)
