"""The command palette's entries beside Textual's own: every action of the key registry (a chat's own run on
the chat shown, as its key would in it), the restart of each MCP server that failed and, over the chats, each open
chat to go to."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from textual.app import SystemCommand
from textual.screen import Screen

from mlxchat.app.ui import keys
from mlxchat.app.ui.parts.chat_host import ChatHost
from mlxchat.app.ui.parts.server_notes import restart_server


def palette_commands(app: ChatHost, screen: Screen) -> Iterator[SystemCommand]:
    async def on_shown_chat(action: str) -> None:
        if app.active_chat is not None:
            await app.run_action(action, app.active_chat)

    for action in keys.palette_actions():
        runner = on_shown_chat if action.scope == "pane" else app.run_action
        yield SystemCommand(action.description, action.help, partial(runner, action.action))
    servers = app.session.tools.servers
    for state in servers.states() if servers is not None else []:
        if state.status == "failed":
            yield SystemCommand(f"Restart MCP server {state.name}", f"It failed: {state.error}",
                                partial(restart_server, servers, app.notify, state.name))
    if screen is app.screen_stack[0]:
        for number, pane in enumerate(app.chat_panes, 1):
            yield SystemCommand(f"Go to {pane.chat_title}", f"Show the chat on slot {pane.slot_id}",
                                partial(app.action_goto_chat, number))
