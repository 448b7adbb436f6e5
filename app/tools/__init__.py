"""Tools the chats may call: the MCP servers of the config (servers), and a reply's round of calls (calls)."""
