"""Open tabs by session: each running mlxchat keeps its own, and a launch takes over those of ended ones."""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Callable

from mlxchat.app.chats.chat import Chat, now

# A session not seen for this long counts as ended, even where its pid runs (reused by another
# program, or on another host sharing the folder): the next launch takes its tabs over.
LEASE_S = 600.0
KEEP_ALIVE_S = 60.0  # how often a running app says that it still is


class TabLeases:
    """ChatStore's tabs and sessions (a mixin: it uses the store's connection, transaction and loader)."""

    _db: sqlite3.Connection
    session: str
    _in_session: bool
    _write: Callable[[], AbstractContextManager[sqlite3.Connection]]
    load: Callable[[int], Chat | None]

    def _enter_session(self, db: sqlite3.Connection) -> None:
        """Records this session as running and seen now (again, if a launch took it over meanwhile)."""
        db.execute(
            "INSERT INTO sessions (id, host, pid, seen) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET seen = excluded.seen, ended = NULL",
            (self.session, socket.gethostname(), os.getpid(), now()),
        )
        self._in_session = True

    def keep_alive(self) -> None:
        """Says that this session still runs (every KEEP_ALIVE_S), so that no launch takes its tabs."""
        if self._in_session:
            with self._write() as db:
                self._enter_session(db)

    def claim_open_chats(self) -> tuple[list[Chat], int | None]:
        """Takes over the tabs of the sessions that ended (quit, killed, or past their lease) and returns
        those chats, in tab order, with the id of the one that had focus.

        The tabs of sessions still running stay theirs; a chat open in one of them is not reopened.
        Several ended sessions give their tabs together, the one that ended last first.
        """
        with self._write() as db:
            self._enter_session(db)
            running = running_sessions(db) - {self.session}
            tabs = db.execute(
                "SELECT t.chat_id, t.focused, t.session FROM open_tabs t JOIN sessions s ON s.id = t.session"
                " WHERE t.session != ? ORDER BY coalesce(s.ended, s.seen) DESC, s.id, t.position",
                (self.session,),
            ).fetchall()
            held = {chat_id for chat_id, _, session in tabs if session in running}
            ended = [(tab[0], tab[1]) for tab in tabs if tab[2] not in running and tab[0] not in held]
            ids = list(dict.fromkeys(chat_id for chat_id, _ in ended))
            focused = next((chat_id for chat_id, focus in ended if focus), None)
            db.execute(
                f"DELETE FROM sessions WHERE id != ? AND id NOT IN ({', '.join('?' * len(running))})",
                (self.session, *running),
            )
            self._record_tabs(db, ids, focused)
        chats = [chat for chat in map(self.load, ids) if chat is not None]
        return chats, focused

    def set_open(self, chat_ids: Sequence[int], focused: int | None) -> None:
        """Records which chats this session has open in tabs, in this order, and which one has focus."""
        with self._write() as db:
            self._enter_session(db)
            self._record_tabs(db, chat_ids, focused)

    def _record_tabs(self, db: sqlite3.Connection, chat_ids: Sequence[int], focused: int | None) -> None:
        db.execute("DELETE FROM open_tabs WHERE session = ?", (self.session,))
        db.executemany(
            "INSERT INTO open_tabs (session, chat_id, position, focused) VALUES (?, ?, ?, ?)",
            [(self.session, chat_id, position, int(chat_id == focused)) for position, chat_id in enumerate(chat_ids)],
        )


def running_sessions(db: sqlite3.Connection) -> set[str]:
    """The sessions whose mlxchat still runs: not ended, seen within the lease, and on this host with
    its pid alive (another host's pid cannot be checked: its lease decides)."""
    host, running = socket.gethostname(), set()
    for sid, s_host, pid, seen, ended in db.execute("SELECT id, host, pid, seen, ended FROM sessions"):
        fresh = (datetime.now(UTC) - datetime.fromisoformat(seen)).total_seconds() < LEASE_S
        if ended is None and fresh and (s_host != host or _pid_alive(pid)):
            running.add(sid)
    return running


def _pid_alive(pid: int) -> bool:
    if pid <= 0:  # (kill(0) would signal our own process group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
