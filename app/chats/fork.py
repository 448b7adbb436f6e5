"""Branching a chat: a new chat that holds another's conversation up to a message."""

from __future__ import annotations

import dataclasses

from mlxchat.app.chats.chat import Chat

FORK_SUFFIX = " (fork)"
BEFORE_EDIT_SUFFIX = " (before edit)"  # the conversation as it was before an earlier message was edited


def fork_point(chat: Chat, index: int) -> tuple[int, str]:
    """Where a fork at message `index` cuts, and the text left to send: at a reply the fork keeps it
    (and nothing is left to send); at a message of the user's the fork stops before it, and its text
    is left to be edited and sent in the new chat."""
    if chat.messages[index].role == "user":
        return index, chat.messages[index].text
    return index + 1, ""


def fork(chat: Chat, keep: int, suffix: str = FORK_SUFFIX) -> Chat:
    """A new, unsaved chat with the first `keep` messages of `chat`, its system prompt and sampling.

    The messages are copied as they are, so the fork's first turn renders the same history as its
    parent and the engine can reuse the parent's KV for that prefix.
    """
    messages = [dataclasses.replace(m, saved=False, tool_calls=[dict(c) for c in m.tool_calls],
                                    attachments=[dict(a) for a in m.attachments])
                for m in chat.messages[:keep]]
    return Chat(None, title=(chat.title or "Chat") + suffix, model=chat.model, system_prompt=chat.system_prompt,
                sampling=chat.sampling, messages=messages,
                tools_off=list(chat.tools_off), tools_on=list(chat.tools_on))

