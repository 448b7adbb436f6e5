"""The [mcp] table: the Model Context Protocol servers whose tools the chats may call, and the limits of a call."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class McpServer(BaseModel):
    """One server, [mcp.servers.NAME]: a command mlxchat starts (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    command: str | None = Field(None, min_length=1, examples=["uvx"])
    """The program that runs the server, talking MCP over its stdin and stdout (a local server)."""

    args: list[str] = Field(default_factory=list, examples=[["mcp-server-time"]])
    """The command's arguments."""

    cwd: str | None = Field(None, examples=["~/projects"])
    """The folder the command runs in (unset: mlxchat's own)."""

    env: list[str] = Field(default_factory=list, examples=[["GITHUB_TOKEN"]])
    """The names of environment variables passed to the command from mlxchat's own environment (a secret
    stays in the environment, never in this file)."""

    url: str | None = Field(None, min_length=1)
    """Instead of `command`: the address of a server that speaks MCP's streamable HTTP, as
    url = "http://127.0.0.1:8000/mcp"."""

    headers_env: dict[str, str] = Field(default_factory=dict)
    """HTTP headers to send to `url`, each named with the environment variable that holds its value, as
    headers_env = { Authorization = "MCP_TOKEN" }."""

    enabled: bool = True
    """Whether mlxchat starts the server and offers its tools."""

    tools: list[str] | None = Field(None, examples=[["get_current_time", "convert_time"]])
    """The tools of this server a new chat offers (the others stay off until turned on in the chat's
    settings, F5). Unset: every tool the server lists."""

    auto_approve: list[str] = Field(default_factory=list, examples=[["get_current_time"]])
    """Tools of this server that run without asking. Every other call waits for your approval."""

    @model_validator(mode="after")
    def _one_way_in(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give a server either `command` (a program mlxchat starts) or `url` (streamable HTTP)")
        return self


class Mcp(BaseModel):
    """Tools from MCP servers: the [mcp] table, and a [mcp.servers.NAME] table for each server."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    servers: dict[str, McpServer] = Field(default_factory=dict)
    """The servers, by name: [mcp.servers.time] with command = "uvx" and args = ["mcp-server-time"]."""

    start_timeout: float = Field(20.0, gt=0)
    """Seconds a server may take to start and list its tools; then it is stopped, and named as not answering."""

    tool_timeout: float = Field(60.0, gt=0)
    """Seconds a tool call may take; then it ends, and the model is told it timed out."""

    tool_result_max_tokens: int = Field(2048, ge=16)
    """The most tokens of a tool's result the model is given (about 4 characters a token); the rest is cut,
    with a note to the model that says so."""

    tool_listing_max_tokens: int | None = Field(None, ge=1, examples=[512])
    """The most tokens of a slot the tool listing may take. Unset: a quarter of the slot. A chat whose tools
    take more is given one tool to search them instead, and the tools its model finds, in full (never less
    than the search tool itself takes)."""

    max_tool_rounds: int = Field(8, ge=1, le=100)
    """The most rounds of tool calls one reply may take; at the limit it ends, saying why."""
