"""A reply's round of tool calls, in its chat: each call checked against the tool it names, approved by the user
(unless the config's auto_approve, or the user for this chat, allows it), run on its server in parallel, its result
cut to fit, kept with the reply and shown as an entry under it; then the reply goes on in the same slot."""

from __future__ import annotations

import asyncio
from typing import Protocol

from mlxchat.app.chats.chat import Chat, ChatMessage
from mlxchat.app.chats.conversation import Conversation
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.tools.calls import PlannedCall, cut, plan_calls, record
from mlxchat.app.session.session import Session
from mlxchat.app.tools.listing import SEARCH, Listing, search, search_result
from mlxchat.app.tools.servers import Tool, ToolResult
from mlxchat.app.ui.widgets.conversation_view import ConversationView, note
from mlxchat.app.ui.widgets.tool_widgets import Decision, ToolApproval, ToolEntry
from mlxchat.engine import Done


class RoundPane(Protocol):
    """What a round needs of its chat's pane."""

    chat_id: str
    chat: Chat
    conversation: Conversation
    tool_rounds: int  # rounds since the user's last message
    allowed_tools: set[str]  # tools the user allowed for the chat

    @property
    def view(self) -> ConversationView: ...

    def focus_input(self) -> None: ...


async def next_round(pane: RoundPane, session: Session, done: Done, reply: ChatMessage) -> bool:
    """Runs the calls `done` ended with, keeping them in `reply`; whether the reply goes on with their results
    (not past max_tool_rounds, nor once the user stopped it)."""
    config = session.tools.mcp
    pane.tool_rounds += 1
    if session.tools.servers is None or pane.tool_rounds > config.max_tool_rounds:
        # Kept with the reply, as not run: the model is told so with the user's next message.
        not_run = ToolResult(f"not run: the reply reached max_tool_rounds = {config.max_tool_rounds}", error=True)
        reply.tool_calls = [record(p, not_run, "not run") for p in plan_calls(done.tool_calls, [])]
        pane.conversation.kept(reply)
        await pane.view.mount_all([*(ToolEntry(saved) for saved in reply.tool_calls),
                                   note(f"(the reply stopped at max_tool_rounds = {config.max_tool_rounds}: its last "
                                        "calls were not run; send a message to go on)")])
        return False
    try:
        return await _run(pane, done, reply, session, config)
    finally:
        session.tool_waits.pop(pane.chat_id, None)


async def _run(pane: RoundPane, done: Done, reply: ChatMessage, session: Session, config: Mcp) -> bool:
    """The round: each call approved or not, the approved run at once; whether the reply goes on."""
    servers = session.tools.servers
    assert servers is not None
    listing = session.tools.listing(pane.chat)
    planned = plan_calls(done.tool_calls, listing.callable)
    calls = [record(p, ToolResult(""), "planned") for p in planned]  # (what the results' room is counted with)
    limit = min(config.tool_result_max_tokens, session.tools.room_for_results(pane.chat, reply, calls))
    results: dict[str, tuple[ToolResult, str]] = {}
    found: dict[str, list[Tool]] = {}
    approved: list[PlannedCall] = []
    stopped = False
    for p in planned:
        if p.problem is not None or p.tool is None:
            results[p.call.id] = (ToolResult(p.problem or "no such tool", error=True), "invalid")
            continue
        if p.tool is SEARCH:  # (mlxchat's own, run at once: it reads only the tools' names and descriptions)
            found[p.call.id], results[p.call.id] = _search(session, str(p.call.arguments["query"]), listing, limit)
            continue
        server = config.servers.get(p.tool.server)
        allowed = (server is not None and p.tool.name in server.auto_approve) or p.tool.name in pane.allowed_tools
        session.tool_waits[pane.chat_id] = f"{p.tool.name}: your approval"
        decision: Decision = "once" if allowed else await _ask(pane, p)
        if decision == "cancel":  # escape: this call and the ones not asked yet are stopped, the reply ends
            for rest in planned[planned.index(p):]:
                results.setdefault(rest.call.id, (ToolResult("stopped by the user", error=True), "cancelled"))
            stopped = True
            break
        if decision == "deny":
            results[p.call.id] = (ToolResult("the user did not allow this call", error=True), "denied")
            continue
        if decision == "chat":
            pane.allowed_tools.add(p.tool.name)
        approved.append(p)
    # In the order of approval, all at once; none where the user stopped the reply at an approval.
    ran = [ToolResult("stopped by the user", error=True)] * len(approved)
    if not stopped:
        session.tool_waits[pane.chat_id] = f"{', '.join(p.tool.name for p in approved if p.tool)}: its server"
        try:
            calls = [servers.call(p.tool, p.call.arguments, config.tool_timeout) for p in approved if p.tool]
            ran = await asyncio.gather(*(asyncio.wrap_future(call) for call in calls))
        except asyncio.CancelledError:  # escape while they ran: they stop (their server is told), and the reply too
            ran, stopped = [ToolResult("stopped by the user while it ran", error=True)] * len(approved), True
    for p, result in zip(approved, ran):
        text = cut(result.text, limit, session.tools.text_tokens(result.text))
        results[p.call.id] = (ToolResult(text, result.error, result.ms),
                              "cancelled" if stopped else "done")
    reply.tool_calls = [record(p, *results[p.call.id], found.get(p.call.id)) for p in planned]
    pane.conversation.kept(reply)
    await pane.view.mount_all([ToolEntry(saved) for saved in reply.tool_calls])
    return not stopped


def _search(session: Session, query: str, listing: Listing, limit: int) -> tuple[list[Tool], tuple[ToolResult, str]]:
    """The tools that match `query`, as many as their definitions fit in `limit` tokens, and the search's result."""
    found = search(query, listing.offered)
    while found and (session.tools.text_tokens(search_result(query, found)) or 0) > limit:
        found.pop()
    return found, (ToolResult(search_result(query, found)), "done")


async def _ask(pane: RoundPane, planned: PlannedCall) -> Decision:
    """Shows the call and waits for the user's decision."""
    approval = ToolApproval(planned)
    await pane.view.mount(approval)
    approval.focus()
    try:
        return await approval.decision
    finally:
        await approval.remove()
        pane.focus_input()
