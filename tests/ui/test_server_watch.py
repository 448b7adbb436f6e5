"""MCP servers watched while the app is idle: a real server (tests/mcp_server.py, over stdio) killed from outside is
named within 2 s and its tools leave the chat's listing and F5; F5's button and the palette's command restart it."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Button, SelectionList

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from tests.pilot import run, wait_for
from tests.ui.test_tools import tools_app, tools_ready


def said(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def kill_server(app: ChatApp) -> float:
    """Kills the test server's process as a crash would (its pid from its log); when."""
    assert app.session.tools.servers is not None
    log = app.session.tools.servers.states()[0].log
    assert log is not None
    pid = int(re.findall(r"starting \(pid (\d+)\)", log.read_text())[-1])
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


async def named_within_2_s(app: ChatApp, pilot: Pilot, killed: float) -> None:
    failure = re.compile(r"MCP server test: it stopped \(ended by signal SIGKILL\) \(its output: .*mcp-test\.log\)\. "
                         r"The chats go on without its tools \(restart it from F5 or the command palette\)\.")
    await wait_for(pilot, lambda: any(failure.fullmatch(m) for m in said(app)), "the server named")
    assert time.monotonic() - killed < 2.0
    assert app.session.tools.offered_tools() == [] and app.session.tools.tool_schemas() is None


async def back(app: ChatApp, pilot: Pilot) -> None:
    await wait_for(pilot, lambda: "MCP server test is running again: 5 tools." in said(app), "the server back")
    assert [t.name for t in app.session.tools.offered_tools()] == ["weather", "slow", "fails", "long_text", "die"]


def test_a_server_killed_while_idle_is_named_and_f5_or_the_palette_restarts_it(tool_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await tools_ready(app, pilot)
        await named_within_2_s(app, pilot, kill_server(app))
        # F5: no tool of the dead server; the server's line, with its restart button.
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        assert not app.screen.query(SelectionList)
        line = app.screen.query_one("ServerRestarts Static")
        assert re.fullmatch(r"MCP server test failed: it stopped \(ended by signal SIGKILL\) \(its output: .*\)",
                            str(line.render()))
        restart = app.screen.query_one(".restart-server", Button)
        await pilot.click(restart)
        await back(app, pilot)
        assert isinstance(app.screen, ChatSettingsScreen)  # (the form stays open: only the server restarted)
        await pilot.press("escape")
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form again")
        # (its row, which turns all of it on or off, and its 5 tools)
        assert len(app.screen.query_one(SelectionList).options) == 1 + 5 and not app.screen.query(".restart-server")
        await pilot.press("escape")
        # Killed again: the palette offers its restart.
        app._notifications.clear()
        await named_within_2_s(app, pilot, kill_server(app))
        await pilot.press("ctrl+p", *"restart mcp")
        await wait_for(pilot, lambda: any(l.option_count for l in app.screen.query(CommandList)), "the command")
        await pilot.press("enter")
        await back(app, pilot)

    run(tools_app(tool_model_dir), scenario)
