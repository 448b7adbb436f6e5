"""What the session knows of tools and tokens: the MCP servers and the tools they offer a chat, and how many tokens a
chat, its tool listing, a text or a next message take of its slot (the local engine counts; a server's cannot)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from mlxchat.app.chats.chat import Chat, ChatMessage
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.config.settings import Settings
from mlxchat.app.files.attachments import Attachment
from mlxchat.app.files.slot_fit import over_the_slot
from mlxchat.app.paths import logs_dir
from mlxchat.app.tools.listing import SEARCH, Listing, budget, found_in, is_on
from mlxchat.app.tools.servers import Tool, ToolServers
from mlxchat.engine import Messages, ModelFacts, SlotPlan

if TYPE_CHECKING:
    from mlxchat.engine import ChatEngine

# Tokens a slot keeps free for the reply to go on after its tool results (their results are cut to leave them), and
# after a message the user sends.
ROOM_TO_ANSWER = 64


class RunningModel(Protocol):
    """What the counts read of the model running now (the session's: each changes as models switch and slots
    are rebuilt)."""

    engine: ChatEngine | None
    plan: SlotPlan | None
    facts: ModelFacts | None  # the model's (its trained context: the largest slot it can have)
    takes_tools: bool  # whether its replies may call tools
    keep_reasoning: bool  # whether later turns send the replies' reasoning back


class ToolsAndCounts:
    """The session's MCP servers and the tools they offer a chat, and what a chat takes of its slot, counted by the
    running model's engine (the session holds one)."""

    def __init__(self, model: RunningModel) -> None:
        self._model = model
        self.servers: ToolServers | None = None  # the MCP servers of the config, started at launch
        self.mcp = Mcp()  # their settings and the limits of a call
        self._listing_tokens: dict[tuple[str, ...], int | None] = {}  # by tools: what listing them takes

    def start(self, settings: Settings) -> ToolServers:
        """Starts the config's MCP servers in the background (returns at once: they connect on a thread of
        their own)."""
        self.mcp = settings.mcp
        self.servers = ToolServers(settings.mcp, logs_dir())
        self.servers.start()
        return self.servers

    def close(self) -> None:
        """Stops the MCP servers, if they were started."""
        if self.servers is not None:
            self.servers.close()

    def model_changed(self) -> None:
        """Another model runs: its chat template counts the listings anew."""
        self._listing_tokens = {}

    def available_tools(self) -> list[Tool]:
        """Every tool of the servers that are ready, where the model takes tools (each on or off in F5)."""
        return self.servers.tools() if self.servers is not None and self._model.takes_tools else []

    def offered_tools(self, chat: Chat | None = None) -> list[Tool]:
        """The tools `chat` offers (a new chat's, for None): its own choices, else each server's `tools`."""
        return [tool for tool in self.available_tools() if is_on(tool, chat, self.mcp)]

    def listing(self, chat: Chat | None = None, offered: list[Tool] | None = None) -> Listing:
        """How `chat`'s tools (or `offered`) reach its model: listed in full, or searched where their listing
        would take more than its budget of the slot."""
        offered = self.offered_tools(chat) if offered is None else offered
        tokens = self._tools_tokens(offered) if offered else 0
        search, plan = self._tools_tokens([SEARCH]), self._model.plan
        limit = None if search is None or plan is None else budget(self.mcp, plan.per_slot, search)
        keys = found_in(chat) if chat is not None else []
        by_key = {tool.key: tool for tool in offered}
        return Listing(offered, tokens, limit, [by_key[key] for key in keys if key in by_key], search)

    def _tools_tokens(self, tools: list[Tool]) -> int | None:
        """What listing `tools` takes of a slot, as the model's chat template writes them (None: it cannot say)."""
        engine = self._model.engine
        if engine is None:
            return None
        key = tuple(tool.key for tool in tools)
        if key not in self._listing_tokens:
            opening = [{"role": "user", "content": ""}]
            whole = engine.count_tokens(opening, [tool.function() for tool in tools])
            bare = engine.count_tokens(opening)
            self._listing_tokens[key] = None if whole is None or bare is None else whole - bare
        return self._listing_tokens[key]

    def tool_schemas(self, chat: Chat | None = None, offered: list[Tool] | None = None) -> list[dict[str, Any]] | None:
        """The tools the chat template lists for `chat` (or for `offered`; None where there are none)."""
        listing = self.listing(chat, offered)
        return listing.schemas(listing.listed)

    def listing_tokens(self, system_prompt: str, chat: Chat | None = None,
                       offered: list[Tool] | None = None) -> tuple[int, int] | None:
        """What a chat takes of its slot before its first message: (tokens of its system prompt and tool listing, of
        which the listing), with its tools or `offered`; None where the engine cannot say (a server's template is
        its own)."""
        engine = self._model.engine
        if engine is None:
            return None
        opening = [{"role": "system", "content": system_prompt}] if system_prompt else []
        opening.append({"role": "user", "content": ""})
        tools = self.tool_schemas(chat, offered)
        whole = engine.count_tokens(opening, tools)
        bare = engine.count_tokens(opening) if tools else whole
        return None if whole is None or bare is None else (whole, whole - bare)

    def room_for_results(self, chat: Chat, reply: ChatMessage, calls: list[dict[str, Any]]) -> int:
        """The tokens each result of `calls` (the chat's `reply` ends with them, as the chat keeps calls) may take in
        the chat's slot: what the conversation with the calls and their results' turns, still empty, and the tool
        listing leave (all as the model's template writes them), less room for the reply to go on (ROOM_TO_ANSWER)."""
        engine, plan = self._model.engine, self._model.plan
        if engine is None or plan is None:
            return 0
        waiting = replace(reply, tool_calls=[call | {"result": ""} for call in calls])
        going_on = replace(chat, messages=[waiting if m is reply else m for m in chat.messages])
        used = engine.count_tokens(going_on.prompt(self._model.keep_reasoning), self.tool_schemas(chat))
        if used is None:  # (a server's: its own context decides)
            return self.mcp.tool_result_max_tokens
        return max(0, plan.per_slot - used - ROOM_TO_ANSWER) // max(1, len(calls))

    def cannot_go_on(self, chat: Chat) -> str:
        """Why a reply cannot go on after its tool results (the engine refused it): the chat with them no longer fits
        its slot."""
        engine, plan = self._model.engine, self._model.plan
        needed = None if engine is None else engine.count_tokens(chat.prompt(self._model.keep_reasoning),
                                                                 self.tool_schemas(chat))
        size = (f"{needed:,} tokens, over its slot's {plan.per_slot:,}" if needed and plan else
                "more than its slot holds")
        return (f"The reply cannot go on: with its tool results the chat takes {size}. The results are kept: start a "
                "new chat, fork this one at an earlier message (F8), or give each slot more room (F2).")

    def refusal(self, messages: Messages, chat: Chat, files: list[Attachment]) -> str | None:
        """Why `messages`, the chat's conversation with its next message, cannot be sent: it does not fit the slot
        with room for the reply (saying what would); None where it fits or the engine cannot count (a server)."""
        listing, engine, plan, facts = self.listing(chat), self._model.engine, self._model.plan, self._model.facts
        needed = None if engine is None else engine.count_tokens(messages, listing.schemas(listing.listed))
        if needed is None or plan is None:
            return None
        trained = facts.trained_ctx if facts is not None else None
        refused = over_the_slot(needed, ROOM_TO_ANSWER, plan.per_slot, plan.ctx_size, files, trained)
        if refused is None or listing.deferred or not listing.tokens:
            return refused
        if needed - listing.tokens + ROOM_TO_ANSWER > plan.per_slot:  # (it would not fit without it either)
            return refused
        return (f"{refused} Or with a shorter tool listing: the {len(listing.offered)} tools of {listing.servers()} "
                f"take {listing.tokens:,} tokens of it. Turn tools off for this chat (F5), or set "
                f"mcp.tool_listing_max_tokens under {listing.tokens:,} to have them searched instead.")

    def image_tokens(self, path: str) -> int | None:
        """How many tokens the image at `path` is to the model, counted by its processor (None: it takes no images)."""
        engine = self._model.engine
        return None if engine is None else engine.image_tokens(path)

    def text_tokens(self, text: str) -> int | None:
        """How many tokens `text` is to the model (None where the engine cannot say)."""
        engine = self._model.engine
        if engine is None:
            return None
        with_text = engine.count_tokens([{"role": "user", "content": text}])
        bare = engine.count_tokens([{"role": "user", "content": ""}])
        return None if with_text is None or bare is None else with_text - bare
