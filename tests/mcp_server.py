"""A real MCP server for the tests, written with the SDK's MCPServer: `python -m tests.mcp_server stdio`, or
`python -m tests.mcp_server http PORT` (streamable HTTP on localhost; with TOOLS_HTTP_TOKEN set, only for requests
that carry it). Its tools answer, take their time, raise, return a very long text, and end the server's own
process."""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("mlxchat-test-tools")


@server.tool()
async def weather(city: str) -> str:
    """Today's weather in a city (after TOOLS_WEATHER_DELAY seconds, after TOOLS_WEATHER_PREFIX and with
    TOOLS_WEATHER_WORDS words of detail, where a test sets them)."""
    await anyio.sleep(float(os.environ.get("TOOLS_WEATHER_DELAY", "0")))
    detail = "".join(f" detail{i}" for i in range(int(os.environ.get("TOOLS_WEATHER_WORDS", "0"))))
    return f"{os.environ.get('TOOLS_WEATHER_PREFIX', '')}18 °C and clear in {city}{detail}"


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await anyio.sleep(seconds)
    return f"done after {seconds} s"


@server.tool()
def fails(reason: str) -> str:
    """Always fails, with `reason`."""
    raise ValueError(reason)


@server.tool()
def long_text(words: int) -> str:
    """`words` words of text."""
    return " ".join(f"word{i}" for i in range(words))


@server.tool()
def die() -> str:
    """Ends the server's process in the middle of the call."""
    os._exit(3)


def serve_http_with_a_token(port: int, token: str) -> None:
    """Streamable HTTP that refuses, with 401, every request not sent with `Authorization: Bearer <token>`."""
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    wanted = f"Bearer {token}".encode()

    async def guarded(scope, receive, send) -> None:  # (an ASGI app around the SDK's)
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != wanted:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"a token is needed"})
            return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    # (for the log file's test, and the pid for the tests that kill the server)
    print(f"mlxchat-test-tools: starting (pid {os.getpid()})", file=sys.stderr, flush=True)
    if sys.argv[1] == "http" and os.environ.get("TOOLS_HTTP_TOKEN"):  # (headers_env's test)
        serve_http_with_a_token(int(sys.argv[2]), os.environ["TOOLS_HTTP_TOKEN"])
    elif sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
