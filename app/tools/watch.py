"""How the MCP servers are watched: the event loop that keeps each server's process (its exit code to name, and a
way to stop one that never answered at once), and a read stream that says when a server's connection ended."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from contextvars import ContextVar
from typing import Any

import anyio

# The server a task of the loop serves: the process the SDK starts from that task is kept under its name.
SERVING: ContextVar[str] = ContextVar("mlxchat_mcp_serving")


class ServerLoop(asyncio.SelectorEventLoop):
    """The servers' event loop: asyncio's own, which keeps the transport of each process the SDK starts (through
    anyio, which asks the loop) under the name of the server being served."""

    def __init__(self) -> None:
        super().__init__()
        self.processes: dict[str, asyncio.SubprocessTransport] = {}

    async def subprocess_exec(self, protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        transport, protocol = await super().subprocess_exec(protocol_factory, *args, **kwargs)
        name = SERVING.get(None)
        if name is not None:
            self.processes[name] = transport
        return transport, protocol

    def exit_code(self, name: str) -> int | None:
        """The exit code of the server's process, once it ended (negative: the signal that ended it)."""
        process = self.processes.get(name)
        return None if process is None else process.get_returncode()

    def stop_process(self, name: str) -> None:
        """Ends the server's process and what it started (its own process group, as the SDK starts it) at once."""
        process = self.processes.get(name)
        if process is not None and process.get_returncode() is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.get_pid(), signal.SIGTERM)


def exit_words(code: int) -> str:
    """An exit code as one reads it: `exit code 3`, or `ended by signal SIGKILL` for a process a signal ended."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"ended by signal {signal.Signals(-code).name}"
    except ValueError:
        return f"ended by signal {-code}"


class _EndWatch:
    """A transport's read stream that sets `ended` once it ends (the server closed its side, or exited)."""

    def __init__(self, stream: Any, ended: asyncio.Event) -> None:
        self._stream = stream
        self._ended = ended

    def __getattr__(self, name: str) -> Any:  # (the SDK reads the stream's `last_context` where it has one)
        return getattr(self._stream, name)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@asynccontextmanager
async def watched(transport: Any, ended: asyncio.Event) -> AsyncIterator[tuple[Any, Any]]:
    """`transport` (an SDK transport), whose read stream sets `ended` when the connection ends."""
    async with transport as (read, write):
        yield _EndWatch(read, ended), write
