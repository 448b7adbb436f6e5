"""A reply's tool calls on the app's side, with no Textual: each matched to the tool it names and its arguments
checked against the tool's schema, the record the chat keeps of it, its result cut to fit, and its one-line summary."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlxchat.app.tools.servers import Tool, ToolResult
from mlxchat.engine import ToolCall

CHARS_PER_TOKEN = 4  # how a result is sized before the model's tokenizer reads it


@dataclass
class PlannedCall:
    """A call the model made: the tool it names, or why it cannot run (the model is told that instead)."""

    call: ToolCall
    tool: Tool | None
    problem: str | None = None

    @property
    def label(self) -> str:
        """The call as one reads it: `weather(city="Paris")`."""
        arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.call.arguments.items())
        return f"{self.call.name or '?'}({arguments})"


def plan_calls(calls: tuple[ToolCall, ...], tools: list[Tool]) -> list[PlannedCall]:
    """Each call with its tool, or its problem: it could not be read, names no offered tool, or its arguments do
    not match the tool's input schema (checked with jsonschema)."""
    from jsonschema import Draft202012Validator

    by_name = {tool.name: tool for tool in tools}
    planned = []
    for call in calls:
        tool = by_name.get(call.name)
        if call.error:
            planned.append(PlannedCall(call, None, call.error))
        elif tool is None:
            offered = ", ".join(by_name) or "none"
            planned.append(PlannedCall(call, None, f"there is no tool named {call.name!r} (offered: {offered})"))
        else:
            validator = Draft202012Validator(tool.schema or {"type": "object"})
            errors = [e.message for e in validator.iter_errors(call.arguments)]
            planned.append(PlannedCall(call, tool, f"invalid arguments: {'; '.join(errors)}" if errors else None))
    return planned


def cut(text: str, max_tokens: int, tokens: int | None = None) -> str:
    """`text`, cut to about `max_tokens` tokens (`tokens`: how many it has, where the model's tokenizer said; else
    CHARS_PER_TOKEN characters make one), with a note to the model when it was."""
    tokens = tokens if tokens is not None else -(-len(text) // CHARS_PER_TOKEN)
    if tokens <= max_tokens:
        return text
    limit = len(text) * max_tokens // tokens
    return f"{text[:limit]}\n[the result was cut: {len(text):,} characters, of which the first {limit:,} are shown]"


def record(planned: PlannedCall, result: ToolResult, status: str, found: list[Tool] | None = None) -> dict[str, Any]:
    """What the chat keeps of a call (saved with its reply): enough to show it and to send it back to the model; a
    search's the tools it found, which the chat's replies may call from then on."""
    call = planned.call
    kept = {"id": call.id, "name": call.name, "server": planned.tool.server if planned.tool else "",
            "arguments": call.arguments, "result": result.text, "error": result.error, "ms": result.ms,
            "status": status}
    return kept if found is None else kept | {"found": [tool.key for tool in found]}


def summary(saved: dict[str, Any]) -> str:
    """A call in one line: `⚙ weather(city="Paris") → 18 °C and clear · 340 ms`."""
    arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in saved["arguments"].items())
    first = (saved.get("result") or "").strip().splitlines()[:1]
    result = (first[0][:60] + ("…" if len(first[0]) > 60 else "")) if first else "(nothing)"
    mark = "✗ " if saved.get("error") else ""
    took = f" · {saved['ms']:,.0f} ms" if saved.get("ms") else ""
    return f"⚙ {saved['name']}({arguments}) → {mark}{result}{took}"
