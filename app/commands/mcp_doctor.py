"""`mlxchat doctor`'s lines on the MCP servers of the config: each started, with its tools, or why it is not."""

from __future__ import annotations

from collections.abc import Callable

from mlxchat.app.config.settings import Settings
from mlxchat.app.paths import logs_dir
from mlxchat.app.tools.servers import ToolServers


def start_servers(settings: Settings) -> ToolServers | None:
    """Starts every server as the app does, in the background (doctor's other checks run meanwhile); None where
    none is configured. The caller closes them."""
    if not settings.mcp.servers:
        return None
    servers = ToolServers(settings.mcp, logs_dir())
    servers.start()
    return servers


def mcp_lines(settings: Settings, servers: ToolServers | None, line: Callable[[str, str], None]) -> int:
    """Says how each server's start went (waiting for those still starting); returns how many failed."""
    if servers is None:
        line("tools", "no MCP servers configured ([mcp.servers.NAME] in the config)")
        return 0
    servers.settled(settings.mcp.start_timeout + 1)
    failed = 0
    for state in servers.states():
        if state.status == "ready":
            names = ", ".join(tool.name for tool in state.tools) or "none"
            line(f"mcp {state.name}", f"ready, {len(state.tools)} tools: {names}")
        elif state.status == "off":
            line(f"mcp {state.name}", "off (enabled = false)")
        else:
            failed += 1
            why = state.why() if state.status == "failed" else \
                f"it did not answer within {settings.mcp.start_timeout:g} s"
            line(f"mcp {state.name}", f"ERROR: {why}; the chats go on without it")
    return failed
