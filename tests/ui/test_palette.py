"""The command palette offers every action of the key registry."""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path

from textual.app import SystemCommand
from textual.command import CommandList
from textual.pilot import Pilot

from mlxchat.app.ui import keys
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.find import FindScreen
from tests.pilot import make_app, open_second_chat, run, wait_for


def runs(command: SystemCommand) -> str | None:
    """The action a palette command runs, written as the key registry writes actions."""
    callback = command.callback
    if isinstance(callback, partial):
        name = callback.func.__name__
        if name in ("run_action", "on_shown_chat"):
            return str(callback.args[0])
        if name.startswith("action_"):
            return f"{name.removeprefix('action_')}({', '.join(map(repr, callback.args))})"
    if inspect.ismethod(callback) and callback.__name__.startswith("action_"):
        return callback.__name__.removeprefix("action_")  # Textual's own, such as Quit
    return None


def test_every_action_of_the_registry_is_in_the_palette(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await open_second_chat(app, pilot)
        commands = list(app.get_system_commands(app.screen))
        offered = {runs(command) for command in commands}
        open_chats = len(app.chat_panes)
        missing = [
            action.id for action in keys.ACTIONS
            if action.action not in offered
            # alt+N goes to the Nth chat: the palette names each open chat instead ("Go to …").
            and not (action.id.startswith("goto_chat_") and int(action.id.removeprefix("goto_chat_")) > open_chats)
        ]
        assert missing == []
        goto = {command.title: runs(command) for command in commands if command.title.startswith("Go to ")}
        assert goto == {f"Go to {pane.chat_title}": f"goto_chat({n})" for n, pane in enumerate(app.chat_panes, 1)}
        # The registry's own entries are named as the help screen names them.
        titles = {command.title for command in commands}
        assert {a.description for a in keys.palette_actions()} <= titles and "Quit" in titles

    run(make_app(tiny_model_dir), scenario)


def test_a_new_action_runs_from_the_palette(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await open_second_chat(app, pilot)
        await pilot.press("ctrl+p", *"find")
        await wait_for(pilot, lambda: any(l.option_count for l in app.screen.query(CommandList)), "the matches")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")

    run(make_app(tiny_model_dir), scenario)
