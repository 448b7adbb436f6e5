"""What the session knows of tools and tokens: the MCP servers and the tools they offer a chat, and how many tokens a
chat, its tool listing, a text or a next message take of its slot (the local engine counts; a server's cannot)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlxchat.app.chats.chat import Chat
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.config.settings import Settings
from mlxchat.app.files.attachments import Attachment
from mlxchat.app.files.room import over_the_slot
from mlxchat.app.paths import logs_dir
from mlxchat.app.tools.servers import Tool, ToolServers
from mlxchat.engine import Messages, SlotPlan

if TYPE_CHECKING:
    from mlxchat.engine import ChatEngine

# Tokens a slot keeps free for the reply to go on after its tool results (their results are cut to leave them), and
# after a message the user sends.
ROOM_TO_ANSWER = 64


class ToolsAndCounts:
    """The session's tools and token counts (Session is one)."""

    engine: ChatEngine | None
    plan: SlotPlan | None
    tools: ToolServers | None
    mcp: Mcp
    takes_tools: bool
    keep_reasoning: bool

    def start_tools(self, settings: Settings) -> ToolServers:
        """Starts the config's MCP servers in the background (returns at once: they connect on a thread of
        their own)."""
        self.mcp = settings.mcp
        self.tools = ToolServers(settings.mcp, logs_dir())
        self.tools.start()
        return self.tools

    def offered_tools(self, chat: Chat | None = None) -> list[Tool]:
        """The tools a reply may call now: those of the servers that are ready, where the model takes tools, less
        those `chat` turned off."""
        tools = self.tools.tools() if self.tools is not None and self.takes_tools else []
        return [tool for tool in tools if chat is None or tool.key not in chat.tools_off]

    def tool_schemas(self, chat: Chat | None = None) -> list[dict[str, Any]] | None:
        """The offered tools as the chat template takes them (None where there are none)."""
        return [tool.function() for tool in self.offered_tools(chat)] or None

    def listing_tokens(self, system_prompt: str, chat: Chat | None = None) -> tuple[int, int] | None:
        """What a chat takes of its slot before its first message: (tokens of its system prompt and tool listing, of
        which the listing); None where the engine cannot say (a server's template is its own)."""
        if self.engine is None:
            return None
        opening = [{"role": "system", "content": system_prompt}] if system_prompt else []
        opening.append({"role": "user", "content": ""})
        tools = self.tool_schemas(chat)
        whole = self.engine.count_tokens(opening, tools)
        bare = self.engine.count_tokens(opening) if tools else whole
        return None if whole is None or bare is None else (whole, whole - bare)

    def room_for_results(self, chat: Chat, results: int) -> int:
        """The tokens each of `results` tool results may take in the chat's slot: what the conversation and the
        tool listing leave, less room for the reply to go on (ROOM_TO_ANSWER)."""
        if self.engine is None or self.plan is None:
            return 0
        used = self.engine.count_tokens(chat.prompt(self.keep_reasoning), self.tool_schemas(chat))
        if used is None:  # (a server's: its own context decides)
            return self.mcp.tool_result_max_tokens
        return max(0, self.plan.per_slot - used - ROOM_TO_ANSWER) // max(1, results)

    def refusal(self, messages: Messages, chat: Chat, files: list[Attachment]) -> str | None:
        """Why `messages`, the chat's conversation with its next message, cannot be sent: it does not fit the slot
        with room for the reply (saying what would); None where it fits or the engine cannot count (a server)."""
        needed = None if self.engine is None else self.engine.count_tokens(messages, self.tool_schemas(chat))
        if needed is None or self.plan is None:
            return None
        return over_the_slot(needed, ROOM_TO_ANSWER, self.plan.per_slot, self.plan.ctx_size, files)

    def image_tokens(self, path: str) -> int | None:
        """How many tokens the image at `path` is to the model, counted by its processor (None: it takes no images)."""
        return None if self.engine is None else self.engine.image_tokens(path)

    def text_tokens(self, text: str) -> int | None:
        """How many tokens `text` is to the model (None where the engine cannot say)."""
        if self.engine is None:
            return None
        with_text = self.engine.count_tokens([{"role": "user", "content": text}])
        bare = self.engine.count_tokens([{"role": "user", "content": ""}])
        return None if with_text is None or bare is None else with_text - bare
