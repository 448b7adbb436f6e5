"""A tool call in a chat: the question before it runs (ToolApproval), and the entry it leaves in the reply
(ToolEntry: one line that opens on its arguments and whole result)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Collapsible, Static

from mlxchat.app.tools.calls import PlannedCall, summary

Decision = Literal["once", "chat", "deny", "cancel"]


class ToolApproval(Vertical, can_focus=True):
    """Asks whether a call may run: its tool, its server and its full arguments; a: allow once, t: allow the tool
    in this chat, d: deny (the model is told), escape: stop the reply."""

    DEFAULT_CSS = """
    ToolApproval { height: auto; border: round $warning; padding: 0 1; margin: 1 8 0 0; }
    ToolApproval .tool-arguments { color: $text-muted; }
    ToolApproval Horizontal { height: auto; }
    ToolApproval Button { margin-right: 2; }
    """
    BINDINGS = [
        Binding("a", "decide('once')", "Allow once"),
        Binding("t", "decide('chat')", "Allow in this chat"),
        Binding("d", "decide('deny')", "Deny"),
        Binding("escape", "decide('cancel')", "Stop the reply", priority=True),
    ]

    def __init__(self, planned: PlannedCall) -> None:
        super().__init__(classes="tool-approval")
        self.planned = planned
        self.decision: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()

    def compose(self) -> ComposeResult:
        tool = self.planned.tool
        assert tool is not None
        yield Static(f"⚙ The model calls {tool.name} on {tool.server}:", markup=False)
        arguments = json.dumps(self.planned.call.arguments, ensure_ascii=False, indent=2)
        yield Static(arguments, classes="tool-arguments", markup=False)
        with Horizontal():
            yield Button("Allow once (a)", id="once", variant="primary")
            yield Button("Allow in this chat (t)", id="chat")
            yield Button("Deny (d)", id="deny", variant="error")

    def on_mount(self) -> None:
        self.focus()
        self.scroll_visible(animate=False)

    def on_unmount(self) -> None:
        self.action_decide("cancel")  # (the chat closed, or mlxchat quit, before the user decided)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_decide(event.button.id or "deny")  # type: ignore[arg-type]

    def action_decide(self, decision: Decision) -> None:
        if not self.decision.done():
            self.decision.set_result(decision)


class ToolEntry(Collapsible):
    """A call and its result in the reply: `⚙ weather(city="Paris") → 18 °C · 340 ms`, opened on the whole."""

    DEFAULT_CSS = """
    ToolEntry { background: $background; border-top: none; padding: 0; margin: 1 8 0 0; }
    ToolEntry CollapsibleTitle { color: $text-accent; padding: 0; }
    ToolEntry > Contents { padding: 0 0 0 2; }
    ToolEntry .tool-result { color: $text-muted; }
    """

    def __init__(self, saved: dict[str, Any]) -> None:
        arguments = json.dumps(saved["arguments"], ensure_ascii=False, indent=2)
        status = {"denied": "denied by you", "invalid": "not run", "cancelled": "stopped",
                  "not run": "not run"}.get(saved.get("status", ""))
        server = f"on {saved['server']}" if saved.get("server") else "no server"
        head = f"{server}{' · ' + status if status else ''}"
        super().__init__(Static(f"{head}\narguments: {arguments}", markup=False),
                         Static(saved.get("result") or "(no result)", classes="tool-result", markup=False),
                         title=summary(saved), collapsed=True, classes="tool-entry")
