"""`mlxchat doctor`'s lines on the MCP servers of the config: each started, with its tools, or why it is not."""

from __future__ import annotations

from collections.abc import Callable

from mlxchat.app.config.settings import Settings
from mlxchat.app.paths import logs_dir
from mlxchat.app.tools.servers import ToolServers


def mcp_lines(settings: Settings, line: Callable[[str, str], None]) -> int:
    """Starts every server as the app does and says how it went; returns how many failed."""
    if not settings.mcp.servers:
        line("tools", "no MCP servers configured ([mcp.servers.NAME] in the config)")
        return 0
    servers = ToolServers(settings.mcp, logs_dir())
    servers.start()
    servers.settled(settings.mcp.start_timeout + 1)
    failed = 0
    try:
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
    finally:
        servers.close()
    return failed
