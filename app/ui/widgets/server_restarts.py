"""F5's lines on the MCP servers that failed: each with why, and a button that starts it again."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from mlxchat.app.tools.servers import ServerState


class ServerRestarts(Vertical):
    """A line per failed server and its Restart button (`restart`: whether the server was one to restart)."""

    DEFAULT_CSS = """
    ServerRestarts { height: auto; }
    ServerRestarts Horizontal { height: auto; align-horizontal: left; margin-bottom: 0; }
    ServerRestarts Static { width: 1fr; color: $warning; padding-top: 1; }
    """

    def __init__(self, failed: list[ServerState], restart: Callable[[str], bool]) -> None:
        super().__init__()
        self._failed = failed
        self._restart = restart

    def compose(self) -> ComposeResult:
        for state in self._failed:
            with Horizontal():
                yield Static(f"MCP server {state.name} failed: {state.why()}", markup=False)
                yield Button(f"Restart {state.name}", name=state.name, classes="restart-server")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()  # (not the form's: its other buttons cancel it)
        if event.button.name is not None and self._restart(event.button.name):
            event.button.label, event.button.disabled = "Restarting…", True
