"""Finding chats: the listing, newest first, and where a search matched in each (title or which message)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from mlxchat.app.chats.tabs import running_sessions

EXCERPT_BEFORE = 30  # a search result shows this many characters before its match
EXCERPT_CHARS = 90  # and this many in all


@dataclass(frozen=True)
class ChatSummary:
    """A line of the chat list."""

    id: int
    title: str
    updated: str
    messages: int
    open: bool  # in a tab of a running mlxchat, this one or another
    open_here: bool = False  # in a tab of this store's own session
    found: Found | None = None  # where a search found its text


@dataclass(frozen=True)
class Found:
    """Where a search matched in a chat: which part ("the title", "your message 2", "reply 1") and the
    text around the match, on one line, with the match at [start:end]."""

    where: str
    excerpt: str
    start: int
    end: int


class ChatSearch:
    """ChatStore's listing and search (a mixin: it uses the store's connection and session)."""

    _db: sqlite3.Connection
    session: str
    _in_session: bool

    def list_chats(self, search: str = "") -> list[ChatSummary]:
        """Every chat, most recently updated first; with `search`, those whose title or text contains it."""
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._db.execute(
            "SELECT c.id, c.title, c.updated, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id)"
            " FROM chats c"
            " WHERE ? = '' OR c.title LIKE ? ESCAPE '\\'"
            " OR EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = c.id AND m.text LIKE ? ESCAPE '\\')"
            " ORDER BY c.updated DESC, c.id DESC",
            (search, pattern, pattern),
        ).fetchall()
        running = running_sessions(self._db)
        tabs = self._db.execute("SELECT chat_id, session FROM open_tabs").fetchall()
        open_ids = {chat_id for chat_id, session in tabs if session in running}
        here = {chat_id for chat_id, session in tabs if session == self.session and self._in_session}
        return [ChatSummary(id, title, updated, count, id in open_ids or id in here, id in here,
                            self._found(id, title, search, pattern) if search else None)
                for id, title, updated, count in rows]

    def _found(self, chat_id: int, title: str, search: str, pattern: str) -> Found | None:
        """Where `search` first matches in a chat: its title, else its first message that holds it."""
        in_title = _excerpt(title, search)
        if in_title is not None:
            return Found("in the title", *in_title)
        row = self._db.execute(
            "SELECT m.role, m.text, (SELECT count(*) FROM messages e WHERE e.chat_id = m.chat_id"
            " AND e.role = m.role AND e.seq <= m.seq) FROM messages m"
            " WHERE m.chat_id = ? AND m.text LIKE ? ESCAPE '\\' ORDER BY m.seq LIMIT 1",
            (chat_id, pattern),
        ).fetchone()
        if row is None:
            return None
        role, text, number = row
        excerpt = _excerpt(text, search) or (" ".join(text.split())[:EXCERPT_CHARS], 0, 0)
        return Found(f"in reply {number}" if role == "assistant" else f"in your message {number}", *excerpt)


def _excerpt(text: str, search: str) -> tuple[str, int, int] | None:
    """The text around the first match of `search` (ignoring case), on one line, with the match's place in it."""
    flat, needle = " ".join(text.split()), " ".join(search.split()).casefold()
    at = flat.casefold().find(needle)
    if at == -1 or len(flat.casefold()) != len(flat):  # (an offset in the folded text must hold in the text)
        return None
    first = max(0, at - EXCERPT_BEFORE)
    excerpt = flat[first : first + EXCERPT_CHARS]
    lead = "…" if first else ""
    tail = "…" if first + EXCERPT_CHARS < len(flat) else ""
    start = at - first + len(lead)
    return lead + excerpt + tail, start, min(start + len(needle), len(lead) + len(excerpt))
