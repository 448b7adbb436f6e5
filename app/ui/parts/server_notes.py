"""The MCP servers as the app watches them while it runs: a server that fails (at start, during a call, or while
idle) is named, one restarted is named again once it is back; the palette and F5 restart a failed one."""

from __future__ import annotations

from collections.abc import Callable

from mlxchat.app.tools.servers import ToolServers
from mlxchat.app.ui.parts.chat_host import ChatHost

WATCH_S = 0.5  # how often the servers' states are looked at (a failure is named within 2 s of it)


def watch_servers(app: ChatHost, servers: ToolServers) -> None:
    """Names each server that fails, and each that is back after a restart, while the app runs."""
    failed: set[str] = set()

    def say() -> None:
        for state in servers.states():
            if state.status == "failed" and state.name not in failed:
                failed.add(state.name)
                app.notify(f"MCP server {state.name}: {state.why()}. The chats go on without its tools "
                           "(restart it from F5 or the command palette).", severity="warning", timeout=15)
            elif state.status == "ready" and state.name in failed:
                failed.discard(state.name)
                app.notify(f"MCP server {state.name} is running again: {len(state.tools)} tools.")

    if servers.states():
        app.set_interval(WATCH_S, say)


def restart_server(servers: ToolServers | None, notify: Callable[[str], object], name: str) -> bool:
    """Starts failed server `name` again (it is named once it is back); whether it was one to restart."""
    if servers is None or not servers.restart(name):
        return False
    notify(f"Restarting MCP server {name}…")
    return True
