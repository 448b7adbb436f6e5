"""A real MCP server with as many tools as a test asks for, each with a long description (a real server's listing
is that long): `python -m tests.many_tools_server NAME COUNT WORDS` over stdio, COUNT tools named NAME_1... whose
descriptions have WORDS words; each answers with its own name and its argument."""

from __future__ import annotations

import sys
from typing import Callable

from mcp.server.mcpserver import MCPServer

WORDS = ("records", "entries", "folder", "index", "project", "archive", "ledger", "catalog", "document", "table")


def answering(name: str) -> Callable[[str], str]:
    def tool(text: str) -> str:
        return f"{name} read {text!r}"

    return tool


if __name__ == "__main__":
    prefix, count, words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    server = MCPServer(f"mlxchat-test-{prefix}")
    for i in range(1, count + 1):
        name = f"{prefix}_{i}"
        detail = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))
        server.add_tool(answering(name), name=name, description=f"Tool {i} of {prefix}: it reads {detail}.")
    server.run("stdio")
