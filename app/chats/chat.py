"""A chat as the app holds it in memory: its messages, settings and times, and what a listing shows of one."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from mlxchat.app.files.attachments import with_files
from mlxchat.engine import SamplingParams

Role = Literal["user", "assistant"]
TITLE_CHARS = 60  # a title taken from the first user message is cut to this


def now() -> str:
    """The time as stored: ISO 8601, UTC, to the millisecond (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def local_time(stamp: str) -> str:
    """A stored time as the user reads it: local, to the minute."""
    return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")


@dataclass
class ChatMessage:
    """One turn of a chat; `saved` is False while the database lacks its latest text."""

    role: Role
    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    created: str = field(default_factory=now)
    updated: str = ""
    saved: bool = False
    # A reply's timings: prompt tokens its slot took from cache and from where ("slot", "memory",
    # "disk"), milliseconds to its first token, and its decode speed.
    cached_tokens: int | None = None
    cached_from: str | None = None
    ttft_ms: float | None = None
    decode_tok_s: float | None = None
    # Tokens drafted for a reply and checked (speculative decoding), and those the model chose too.
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    # A reply's reasoning, apart from its answer (`text`): its text, its tokens and how long it took.
    reasoning: str = ""
    reasoning_tokens: int | None = None
    reasoning_ms: float | None = None
    # The tool calls a reply ended with, each with its result once it ran (app.tools.calls.ToolCallRecord's fields).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # The files a user message was sent with (app.files.attachments.Attachment's records: name, path, size, text,
    # when, tokens): the model reads them fenced before the text.
    attachments: list[dict[str, Any]] = field(default_factory=list)
    model: str = ""  # the model that wrote a reply ("" for the user's, and for replies saved before schema 9)

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created


@dataclass
class Chat:
    """A conversation with its own settings; `id` is None until it is first saved."""

    id: int | None
    title: str = ""
    model: str = ""
    system_prompt: str = ""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    messages: list[ChatMessage] = field(default_factory=list)
    created: str = field(default_factory=now)
    updated: str = ""
    draft: str = ""  # what its message box held, unsent, when mlxchat last quit
    reasoning_open: bool = False  # whether its replies' reasoning blocks are shown open once the answer starts
    tools_off: list[str] = field(default_factory=list)  # tools its replies may not call ("server/tool"; default: none)
    tools_on: list[str] = field(default_factory=list)  # tools it offers that their server's `tools` leaves off
    saved: bool = False  # whether the chats row holds the fields above

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created

    def add(self, role: Role, text: str, attachments: list[dict[str, Any]] | None = None,
            model: str = "") -> ChatMessage:
        """Appends a turn (a user message with the files attached to it, a reply with the model that writes it); the
        first user message names an untitled chat."""
        message = ChatMessage(role, text, attachments=attachments or [], model=model)
        self.messages.append(message)
        if role == "user" and not self.title:
            self.title = title_from(text)
        self.touch()
        return message

    def touch(self) -> None:
        """Marks the chat changed now (its row is saved again with the next save)."""
        self.updated = now()
        self.saved = False

    def prompt(self, keep_reasoning: bool = False) -> list[dict[str, str]]:
        """The conversation as the engine's chat template takes it: the system prompt, then every turn, each
        reply its answer alone (what most templates expect) or, `keep_reasoning`, with its reasoning as
        `reasoning_content` (the field the templates that render past reasoning read)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        turns: list[dict[str, Any]] = []
        for m in self.messages:
            turn: dict[str, Any] = {"role": m.role, "content": with_files(m.text, m.attachments)}
            if keep_reasoning and m.reasoning:
                turn["reasoning_content"] = m.reasoning
            turns.append(turn)
            if m.tool_calls:  # OpenAI's shapes: the calls on the reply, each result a `tool` message after it
                turn["tool_calls"] = [{"id": c["id"], "type": "function",
                                       "function": {"name": c["name"], "arguments": c["arguments"]}}
                                      for c in m.tool_calls]
                turns += [{"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": c.get("result", "")}
                          for c in m.tool_calls]
        return system + turns


# The message fields a row of the messages table holds, in its column order.
MESSAGE_COLUMNS = ("role", "text", "finish_reason", "prompt_tokens", "generated_tokens", "created", "updated",
                   "cached_tokens", "cached_from", "ttft_ms", "decode_tok_s", "reasoning", "reasoning_tokens",
                   "reasoning_ms", "tool_calls", "attachments", "model", "drafted_tokens", "accepted_tokens")
JSON_COLUMNS = ("tool_calls", "attachments")  # the fields held as JSON text


def reasoning_header(message: ChatMessage) -> str:
    """What a reply's folded reasoning says of itself: "Thought for 12.4 s · 412 tokens"."""
    return thought_for(message.reasoning_ms, message.reasoning_tokens)


def thought_for(ms: float | None, tokens: int | None) -> str:
    """"Thought for 12.4 s · 412 tokens", with what is known of the two."""
    parts = [f"Thought for {ms / 1000:.1f} s" if ms is not None else "Thought"]
    if tokens:
        parts.append(f"{tokens:,} token{'s' if tokens != 1 else ''}")
    return " · ".join(parts)


def title_from(text: str) -> str:
    """A chat title from a message: its first non-empty line, cut to TITLE_CHARS."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
