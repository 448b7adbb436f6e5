"""A chat's tool listing, kept within its share of the slot: the tools the chat offers (each server's `tools`, then
the chat's own choices), and, where their listing would take more than mcp.tool_listing_max_tokens, one search tool
in their place. A tool the model finds with it is given to the model in full in the search's result, after the
conversation, and may be called from the next round on: the listing at the head of the prompt never changes, so the
slot keeps its KV and reads only the result (as a prompt cache keeps its prefix where tools are searched)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mlxchat.app.chats.chat import Chat
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.tools.servers import Tool

LISTING_SHARE = 4  # unset, the listing may take a quarter of the slot
FOUND_MAX = 5  # a search gives at most this many tools
SEARCH = Tool(
    "mlxchat", "search_tools",
    "Searches the tools you may call but that are not listed here, by words of their name and description. "
    "Call it when a task needs a tool: the tools found are given in full in its result, and you may call them "
    "from then on.",
    {"type": "object", "properties": {"query": {"type": "string", "description": "words of what the tool does"}},
     "required": ["query"]},
)


def is_on(tool: Tool, chat: Chat | None, mcp: Mcp) -> bool:
    """Whether `chat` offers `tool`: as the chat chose in F5, else as its server's `tools` says (unset: all)."""
    if chat is not None and tool.key in chat.tools_on:
        return True
    if chat is not None and tool.key in chat.tools_off:
        return False
    server = mcp.servers.get(tool.server)
    return server is None or server.tools is None or tool.name in server.tools


def search(query: str, tools: list[Tool]) -> list[Tool]:
    """The tools that match `query` best (FOUND_MAX at most): each word of it found in a tool's name counts twice,
    in its description once."""
    words = set(re.findall(r"\w+", query.lower()))
    scored = []
    for tool in tools:
        name, description = tool.name.lower(), tool.description.lower()
        score = sum(2 * (word in name) + (word in description) for word in words)
        if score:
            scored.append((-score, tool.key, tool))
    return [tool for _, _, tool in sorted(scored)[:FOUND_MAX]]


def search_result(query: str, found: list[Tool]) -> str:
    """What the model is told of a search: the tools found, each as the chat template would have listed it."""
    if not found:
        return f"No tool matches {query!r}: search again with other words."
    lines = [json.dumps(tool.function(), ensure_ascii=False) for tool in found]
    names = ", ".join(tool.name for tool in found)
    return f"Found {names}: you may call {'it' if len(found) == 1 else 'them'} from now on, as defined here:\n" + \
        "\n".join(lines)


def found_in(chat: Chat) -> list[str]:
    """The keys of the tools the chat's searches found, first found first (what the reply may call besides)."""
    keys: list[str] = []
    for message in chat.messages:
        for call in message.tool_calls:
            keys += [key for key in call.get("found", []) if key not in keys]
    return keys


@dataclass(frozen=True)
class Listing:
    """The tools a chat offers and how they reach its model: listed in full, or deferred behind SEARCH."""

    offered: list[Tool]  # every tool the chat offers
    tokens: int | None  # what listing them all takes of the slot (None: the engine cannot count)
    budget: int | None  # the most the listing may take (None: no limit known)
    found: list[Tool]  # the offered tools the chat's searches found
    search_tokens: int | None = None  # what listing SEARCH takes of the slot

    @property
    def deferred(self) -> bool:
        """Whether the tools are searched rather than listed: their listing would take more than the budget."""
        return self.tokens is not None and self.budget is not None and self.tokens > self.budget

    @property
    def listed(self) -> list[Tool]:
        """The tools in the chat template's listing."""
        return [SEARCH] if self.deferred else self.offered

    @property
    def callable(self) -> list[Tool]:
        """The tools a reply may call now."""
        return [SEARCH, *self.found] if self.deferred else self.offered

    @property
    def unlisted(self) -> list[Tool]:
        """The tools a reply may call that the template does not list (defined in the conversation)."""
        return self.found if self.deferred else []

    def schemas(self, tools: list[Tool]) -> list[dict[str, Any]] | None:
        """`tools` as the chat template takes them (None where there are none)."""
        return [tool.function() for tool in tools] or None

    def servers(self) -> str:
        """The servers of the offered tools, each with how many: "fs (12), time (2)"."""
        counts: dict[str, int] = {}
        for tool in self.offered:
            counts[tool.server] = counts.get(tool.server, 0) + 1
        return ", ".join(f"{server} ({n})" for server, n in counts.items())


def budget(mcp: Mcp, per_slot: int, search_tokens: int) -> int:
    """The most tokens a chat's tool listing may take of a slot of `per_slot`: the setting, else LISTING_SHARE of
    the slot; never less than the search tool's own listing (`search_tokens`)."""
    return max(mcp.tool_listing_max_tokens or per_slot // LISTING_SHARE, search_tokens)


def notice(listing: Listing, per_slot: int) -> str | None:
    """What the user is told of a listing that would not fit its budget: which servers, how many tokens, and what is
    done about it (None where it fits)."""
    if not listing.deferred:
        return None
    return (f"The tool listing would not fit: the {len(listing.offered)} tools of {listing.servers()} take "
            f"{listing.tokens:,} tokens of a chat's slot of {per_slot:,}, over the {listing.budget:,} of "
            f"mcp.tool_listing_max_tokens. Each chat is given one tool to search them instead "
            f"({listing.search_tokens or 0:,} tokens), and the tools its model finds. F5 turns tools off for a chat; "
            "F2 makes slots bigger.")
