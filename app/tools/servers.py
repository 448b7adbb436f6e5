"""The MCP servers of the config, each connected by the SDK's Client on one thread of mlxchat's own (an asyncio loop
for all of them), in the background from launch: their tools listed, their calls run, in parallel, each with its
timeout. A server that cannot start, or stops, is named with its reason; the others go on."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlxchat.app.config.mcp import Mcp, McpServer
from mlxchat.app.tools.watch import SERVING, ServerLoop, exit_words, watched

# How often a url server, idle, is asked for its tools: one that went away is named within 2 s. (A program's end is
# seen at once: its output closes.)
PROBE_S = 1.0
CLOSE_S = 8.0  # the most closing waits for the servers to stop (the SDK's grace to each, then its kill)
ServerStatus = Literal["starting", "ready", "failed", "off"]


@dataclass(frozen=True)
class Tool:
    """A tool a server offers: its name, what it does, and the JSON schema of its arguments."""

    server: str
    name: str
    description: str
    schema: dict[str, Any]

    @property
    def key(self) -> str:
        """The tool's name among every server's: "server/tool" (what a chat turns off)."""
        return f"{self.server}/{self.name}"

    def function(self) -> dict[str, Any]:
        """The tool as a chat template takes it: OpenAI's function schema."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.schema}}


@dataclass
class ServerState:
    """One server as the app and `doctor` show it."""

    name: str
    status: ServerStatus
    tools: tuple[Tool, ...] = ()
    error: str = ""
    log: Path | None = None
    log_from: int = 0  # the log's size when the server started: what it wrote since is its output

    def why(self) -> str:
        """Its error, with its log where it wrote something there this time (a program that did not run wrote
        nothing: an empty log is no evidence)."""
        log = self.log
        wrote = log is not None and log.exists() and log.stat().st_size > self.log_from
        return f"{self.error}{f' (its output: {log})' if wrote else ''}"


@dataclass(frozen=True)
class ToolResult:
    """What a call gave: its text (or why it failed), and how long it took."""

    text: str
    error: bool = False
    ms: float = 0.0


@dataclass
class ToolServers:
    """The configured servers, started by `start()` (at once: they connect in the background)."""

    config: Mcp
    log_dir: Path
    _states: dict[str, ServerState] = field(default_factory=dict)
    _clients: dict[str, Any] = field(default_factory=dict)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _thread: threading.Thread | None = None
    _refusals: dict[str, tuple[int, str]] = field(default_factory=dict)  # a url server's last HTTP error status

    def start(self) -> None:
        """Starts the servers' thread and connects every enabled server (returns at once)."""
        for name, server in self.config.servers.items():
            self._states[name] = ServerState(name, "starting" if server.enabled else "off")
        if not any(s.status == "starting" for s in self._states.values()):
            return
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="mlxchat-mcp", daemon=True)
        self._thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        self._loop = loop = ServerLoop()
        asyncio.set_event_loop(loop)
        self._stop = asyncio.Event()
        ready.set()

        async def serve_all() -> None:
            for name, server in self.config.servers.items():
                if server.enabled:
                    self._launch(name)
            assert self._stop is not None
            await self._stop.wait()
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        loop.run_until_complete(serve_all())
        loop.close()

    def _launch(self, name: str) -> None:
        """Starts serving `name` (on the servers' loop)."""
        self._tasks[name] = asyncio.get_running_loop().create_task(self._serve(name, self.config.servers[name]))

    async def _serve(self, name: str, server: McpServer) -> None:
        """Holds one server's connection open until mlxchat closes, or the server fails (then says why)."""
        from mcp import Client

        SERVING.set(name)
        state = self._states[name]
        loop = asyncio.get_running_loop()
        # At the start timeout the server is stopped at once (not after the SDK's grace for a server that answers).
        timer = loop.call_later(self.config.start_timeout, self._not_answered, name, asyncio.current_task())
        ended = asyncio.Event()
        failure: BaseException | None = None
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(watched(self._transport(name, server, stack), ended)))
                listed = await client.list_tools()
                timer.cancel()
                state.tools = tuple(Tool(name, t.name, t.description or "", dict(t.input_schema or {}))
                                    for t in listed.tools)
                state.status, state.error = "ready", ""
                self._clients[name] = client
                failure = await self._watch(server, client, ended)
        except BaseException as exc:  # (the SDK raises exception groups; a cancelled task is a stop)
            failure = exc
        finally:
            timer.cancel()
            self._clients.pop(name, None)
        stopping = self._stop is not None and self._stop.is_set()
        if not stopping and state.status != "failed":  # (a call or the start timeout may have said why first)
            state.status, state.error = "failed", self._failure(name, server, failure, ready=bool(state.tools))

    def _not_answered(self, name: str, task: asyncio.Task[None] | None) -> None:
        state = self._states[name]
        state.status, state.error = "failed", f"it did not answer within {self.config.start_timeout:g} s"
        assert isinstance(self._loop, ServerLoop)
        self._loop.stop_process(name)
        if task is not None:
            task.cancel()

    async def _watch(self, server: McpServer, client: Any, ended: asyncio.Event) -> BaseException | None:
        """Waits until the connection ends: a program's output closes; a url server is asked for its tools every
        PROBE_S while idle, and one that does not take the request is gone (one that is slow to answer is not)."""
        if server.url is None:
            await ended.wait()
            return None
        while not ended.is_set():
            await asyncio.sleep(PROBE_S)
            try:
                async with asyncio.timeout(10 * PROBE_S):
                    await client.list_tools(cache_mode="bypass")
            except TimeoutError:
                continue
            except Exception as exc:
                return exc
        return None

    def _failure(self, name: str, server: McpServer, failure: BaseException | None, ready: bool) -> str:
        """Why a server stopped, in a line: the URL it was at, the exit code of a program that ended, the error."""
        why = describe(failure, server) if failure is not None else ""
        if server.url is not None and name in self._refusals:  # (the SDK's error leaves the HTTP status out)
            return f"{server.url} {refusal_words(name, server, *self._refusals[name])}"
        if server.url is not None:
            where = f"the connection to {server.url} was lost" if ready else f"cannot reach {server.url}"
            return f"{where} ({why})" if why else where
        assert isinstance(self._loop, ServerLoop)
        code = self._loop.exit_code(name)
        if code is not None:
            return f"it {'stopped' if ready else 'exited at once'} ({exit_words(code)})"
        return why or "its connection ended"

    def _transport(self, name: str, server: McpServer, stack: AsyncExitStack) -> Any:
        """The server's transport: its command over stdio (its stderr to a log file), or streamable HTTP."""
        if server.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {header: os.environ.get(variable, "") for header, variable in server.headers_env.items()}
            self._refusals.pop(name, None)

            async def note_refusal(response: Any) -> None:
                if response.status_code >= 400:
                    self._refusals[name] = (response.status_code, response.reason_phrase)

            client = httpx2.AsyncClient(headers=headers, event_hooks={"response": [note_refusal]})
            return streamable_http_client(server.url, http_client=client)
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        env = get_default_environment() | {v: os.environ[v] for v in server.env if v in os.environ}
        params = StdioServerParameters(command=server.command or "", args=server.args, env=env,
                                       cwd=os.path.expanduser(server.cwd) if server.cwd else None)
        state = self._states[name]
        log = state.log = self.log_dir / f"mcp-{name}.log"
        state.log_from = log.stat().st_size if log.exists() else 0
        return stdio_client(params, errlog=stack.enter_context(_private_log(log)))

    # ---- what the app asks ----

    def states(self) -> list[ServerState]:
        """Every configured server, in the config's order."""
        return list(self._states.values())

    def tools(self) -> list[Tool]:
        """The tools of the servers that are ready."""
        return [tool for state in self._states.values() if state.status == "ready" for tool in state.tools]

    def settled(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds until no server is still starting; whether none is."""
        deadline = time.monotonic() + timeout
        while any(s.status == "starting" for s in self._states.values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def call(self, tool: Tool, arguments: dict[str, Any], timeout: float) -> Future[ToolResult]:
        """Runs `tool` with `arguments` (from any thread); the future never fails: a failure is its result."""
        if self._loop is None or tool.server not in self._clients:
            state = self._states.get(tool.server)
            why = state.error if state and state.error else "it is not running"
            done: Future[ToolResult] = Future()
            done.set_result(ToolResult(f"the tool's server {tool.server} cannot take calls: {why}", error=True))
            return done
        return asyncio.run_coroutine_threadsafe(self._call(tool, arguments, timeout), self._loop)

    async def _call(self, tool: Tool, arguments: dict[str, Any], timeout: float) -> ToolResult:
        started = time.perf_counter()

        def took() -> float:
            return round(1000 * (time.perf_counter() - started), 1)

        try:
            async with asyncio.timeout(timeout):
                result = await self._clients[tool.server].call_tool(tool.name, arguments)
        except TimeoutError:
            return ToolResult(f"the call timed out after {timeout:g} s (tool_timeout)", True, took())
        except BaseException as exc:  # (the server stopped, or the connection broke: its tools are gone)
            why = describe(exc, None)
            state = self._states[tool.server]
            state.status, state.error = "failed", f"it stopped during a call to {tool.name} ({why})"
            self._clients.pop(tool.server, None)
            return ToolResult(f"the call failed: the server {tool.server} stopped ({why})", True, took())
        texts = [getattr(c, "text", None) or f"[{getattr(c, 'type', 'content')}]" for c in result.content]
        return ToolResult("\n".join(texts), bool(result.is_error), took())

    def restart(self, name: str) -> bool:
        """Starts a failed server again (from any thread); whether it was one to restart."""
        state = self._states.get(name)
        if state is None or state.status != "failed" or self._loop is None or self._loop.is_closed():
            return False
        state.status, state.error, state.tools = "starting", "", ()
        self._loop.call_soon_threadsafe(self._launch, name)
        return True

    def close(self) -> None:
        """Ends every connection and waits (up to CLOSE_S) until the servers mlxchat started have stopped, those
        still starting too."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(CLOSE_S)


def describe(exc: BaseException, server: McpServer | None) -> str:
    """What went wrong, in a line: the first real error inside the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError) and server is not None:
        return f"cannot run {server.command!r}: no such program (check `command` and your PATH)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def refusal_words(name: str, server: McpServer, status: int, reason: str) -> str:
    """A url server's refusal: its HTTP status, and for one that wants credentials, the setting that sends them."""
    said = f"answered HTTP {status}{f' {reason}' if reason else ''}"
    if status not in (401, 403):
        return said
    if not server.headers_env:
        return (f"{said}: if it needs a token, send it with `headers_env`, e.g. under [mcp.servers.{name}] "
                'headers_env = { Authorization = "MY_TOKEN" } with $MY_TOKEN holding "Bearer <token>"')
    sent = ", ".join(f"{header} from ${variable}{'' if os.environ.get(variable) else ' (not set)'}"
                     for header, variable in server.headers_env.items())
    return f"{said}: check the headers `headers_env` sends ({sent})"


def _private_log(path: Path) -> Any:
    """The log file, readable by the user only (0600), appended to."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a", encoding="utf-8")
