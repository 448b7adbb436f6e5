"""A chat's tool listing on the app's side: which tools a chat offers (its servers' `tools`, then its own choices),
the budget of the listing, and the search that finds deferred tools by the words of their names and descriptions."""

from __future__ import annotations

import json

from mlxchat.app.chats.chat import Chat
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.tools.listing import FOUND_MAX, LISTING_SHARE, Listing, budget, found_in, is_on, search, search_result
from mlxchat.app.tools.servers import Tool

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
WEATHER = Tool("web", "weather", "Today's weather in a city.", SCHEMA)
FORECAST = Tool("web", "forecast", "The weather of the next days, from a weather service.", SCHEMA)
READ = Tool("fs", "read_file", "Reads a file of the project.", SCHEMA)
MCP = Mcp.model_validate({"servers": {"web": {"command": "web"}, "fs": {"command": "fs", "tools": ["list_dir"]}}})


def test_a_chat_offers_its_servers_tools_unless_it_chose_otherwise() -> None:
    assert is_on(WEATHER, None, MCP) and not is_on(READ, None, MCP)  # fs offers only list_dir by default
    chat = Chat(None, tools_off=["web/weather"], tools_on=["fs/read_file"])
    assert not is_on(WEATHER, chat, MCP) and is_on(READ, chat, MCP) and is_on(FORECAST, chat, MCP)


def test_the_budget_is_a_share_of_the_slot_or_the_setting_never_under_the_search_tool() -> None:
    assert budget(Mcp(), 2048, 150) == 2048 // LISTING_SHARE == 512
    assert budget(Mcp(tool_listing_max_tokens=100), 2048, 150) == 150
    assert budget(Mcp(tool_listing_max_tokens=3000), 2048, 150) == 3000
    listing = Listing([WEATHER, READ], 600, 512, [])
    assert listing.deferred and [t.name for t in listing.listed] == ["search_tools"]
    assert not Listing([WEATHER, READ], 500, 512, []).deferred
    assert not Listing([WEATHER, READ], None, 512, []).deferred  # (a server's template: nothing to count)


def test_a_search_ranks_names_over_descriptions_and_gives_each_tool_in_full() -> None:
    tools = [READ, FORECAST, WEATHER]
    assert search("weather", tools) == [WEATHER, FORECAST]  # in weather's name and description, in forecast's text
    assert search("project file", tools) == [READ]
    assert search("stock prices", tools) == []
    many = [Tool("s", f"tool{i}", "it reads", SCHEMA) for i in range(FOUND_MAX + 3)]
    assert len(search("reads", many)) == FOUND_MAX
    result = search_result("weather", [WEATHER])
    first, given = result.split("\n")
    assert first == "Found weather: you may call it from now on, as defined here:"
    assert json.loads(given) == {"type": "function", "function": {
        "name": "weather", "description": "Today's weather in a city.", "parameters": SCHEMA}}
    assert search_result("stock", []) == "No tool matches 'stock': search again with other words."


def test_the_tools_found_are_read_from_the_chats_searches() -> None:
    chat = Chat(None)
    chat.add("user", "Hello")
    reply = chat.add("assistant", "")
    reply.tool_calls = [{"name": "search_tools", "found": ["web/weather"]}, {"name": "weather"}]
    later = chat.add("assistant", "")
    later.tool_calls = [{"name": "search_tools", "found": ["fs/read_file", "web/weather"]}]
    assert found_in(chat) == ["web/weather", "fs/read_file"]
