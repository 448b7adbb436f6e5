"""Saved chats: an SQLite database (WAL) of chats and their messages (schema and migrations: app.chats.schema;
open tabs by session: app.chats.tabs; listing and search: app.chats.search).

The UI thread owns the one connection. What a pane holds in memory (a Chat) is the truth until it
is saved: a save that fails raises StoreWriteError and leaves the unsaved parts marked, so the
next save writes them again.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlxchat.app.chats.errors import StoreError, StoreWriteError
from mlxchat.app.chats.chat import JSON_COLUMNS, MESSAGE_COLUMNS, Chat, ChatMessage, now
from mlxchat.app.chats.private import private_folder
from mlxchat.app.chats.schema import _connect, _set_aside, _Unusable
from mlxchat.app.chats.search import ChatSearch
from mlxchat.app.chats.tabs import TabLeases
from mlxchat.app.paths import default_db_path
from mlxchat.engine import SamplingParams


class ChatStore(TabLeases, ChatSearch):
    """The chat database. Open it with `open_for_app` (repairs) or `open_existing` (reads as found).

    An app's store records its open tabs as a session of its own: other mlxchat processes on the
    same database keep theirs, and a launch reopens only the tabs of sessions that have ended.
    """

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self.session = uuid.uuid4().hex
        self._in_session = False  # whether this store has recorded tabs (then close() ends its session)

    @classmethod
    def open_for_app(cls, path: Path | None = None) -> tuple[ChatStore, str | None]:
        """Opens (creating or migrating) the database; a damaged or newer file is moved aside, never overwritten.

        Returns the store and, when a file was set aside, the message that says where it went.
        Raises StoreError when no database can be used at all (e.g. the folder cannot be created).
        """
        path = path or default_db_path()
        try:
            private_folder(path.parent)
        except OSError as exc:
            raise StoreError(f"cannot create {path.parent} for the chat database: {exc.strerror}") from None
        try:
            return cls(_connect(path), path), None
        except _Unusable as exc:
            aside = _set_aside(path, exc.tag)
            notice = f"{path} {exc.reason}: it was moved to {aside} and a new chat database was started."
        try:
            return cls(_connect(path), path), notice
        except _Unusable as exc:  # only a file created between the two calls could get here
            raise StoreError(f"{path} {exc.reason}") from None

    @classmethod
    def open_existing(cls, path: Path | None = None) -> ChatStore:
        """Opens the database to read it (the command line); raises StoreError if it is missing or unusable."""
        path = path or default_db_path()
        if not path.exists():
            raise StoreError(f"no chats have been saved yet ({path} does not exist)")
        try:
            return cls(_connect(path), path)
        except _Unusable as exc:
            raise StoreError(f"{path} {exc.reason}") from None

    def close(self) -> None:
        """Ends this store's session, its tabs kept for the next launch, and closes the connection (idempotent)."""
        if self._in_session:
            self._in_session = False
            try:
                with self._write() as db:
                    db.execute("UPDATE sessions SET ended = ? WHERE id = ?", (now(), self.session))
            except StoreError:
                pass  # left running, the session still ends when its pid does (or its lease)
        self._db.close()

    # ---- writing ----

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction; any failure rolls it back and becomes a StoreWriteError."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (e.g. a disk full at COMMIT).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreWriteError(f"could not save to {self.path}: {exc}") from None

    def save(self, chat: Chat) -> None:
        """Writes what of `chat` is unsaved (its row, new or changed messages) and drops deleted turns."""
        with self._write() as db:
            row = (chat.title, chat.created, chat.updated, chat.model, chat.system_prompt,
                   *_sampling_row(chat.sampling), chat.draft, chat.reasoning_open, json.dumps(chat.tools_off),
                   json.dumps(chat.tools_on))
            chat_id = chat.id
            if chat_id is None:
                chat_id = db.execute(
                    f"INSERT INTO chats ({_ROW_COLUMNS}) VALUES ({', '.join('?' * len(row))})", row
                ).lastrowid
            elif not chat.saved:
                assignments = ", ".join(f"{c} = ?" for c in _ROW_COLUMNS.split(", "))
                db.execute(f"UPDATE chats SET {assignments} WHERE id = ?", (*row, chat_id))
            # Turns removed in memory (regenerate, edit and resend) go from the database too.
            db.execute("DELETE FROM messages WHERE chat_id = ? AND seq >= ?", (chat_id, len(chat.messages)))
            unsaved = [(seq, m) for seq, m in enumerate(chat.messages) if not m.saved]
            db.executemany(
                f"INSERT OR REPLACE INTO messages (chat_id, seq, {', '.join(MESSAGE_COLUMNS)})"
                f" VALUES (?, ?{', ?' * len(MESSAGE_COLUMNS)})",
                [(chat_id, seq, *(_column(m, c) for c in MESSAGE_COLUMNS)) for seq, m in unsaved],
            )
        chat.id, chat.saved = chat_id, True
        for _, message in unsaved:
            message.saved = True

    def rename(self, chat_id: int, title: str) -> None:
        """Gives a chat a new title."""
        with self._write() as db:
            db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def save_reasoning_open(self, chat_id: int, reasoning_open: bool) -> None:
        """Keeps whether a chat's reasoning blocks show open (a view of the chat, not a change: `updated` stays)."""
        with self._write() as db:
            db.execute("UPDATE chats SET reasoning_open = ? WHERE id = ?", (reasoning_open, chat_id))

    def save_draft(self, chat_id: int, draft: str) -> None:
        """Keeps what chat `chat_id`'s message box holds (not a change of the chat: its `updated` stays)."""
        with self._write() as db:
            db.execute("UPDATE chats SET draft = ? WHERE id = ?", (draft, chat_id))

    def delete(self, chat_id: int) -> None:
        """Deletes a chat and its messages."""
        with self._write() as db:
            db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # ---- reading ----

    def load(self, chat_id: int) -> Chat | None:
        """A chat with its messages, or None when there is no chat `chat_id`."""
        row = self._db.execute(f"SELECT {_CHAT_COLUMNS} FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return None if row is None else self._chat(row)

    def _chat(self, row: tuple) -> Chat:
        *head, draft, reasoning_open, tools_off, tools_on = row
        chat_id, title, created, updated, model, system_prompt, *sampling_row = head
        messages = [
            ChatMessage(**{c: json.loads(v) if c in JSON_COLUMNS else v for c, v in zip(MESSAGE_COLUMNS, values)},
                        saved=True)
            for values in self._db.execute(
                f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE chat_id = ? ORDER BY seq", (chat_id,)
            )
        ]
        values = dict(zip(_SAMPLING_COLUMNS, sampling_row))
        sampling = SamplingParams(**values | {"thinking": bool(values["thinking"])})
        return Chat(chat_id, title, model, system_prompt, sampling, messages, created, updated, draft,
                    bool(reasoning_open), json.loads(tools_off), json.loads(tools_on), saved=True)


# A chat's settings as its row holds them: the SamplingParams fields of these names, in this order.
_SAMPLING_COLUMNS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "thinking", "reasoning_budget",
                     "speculative")
_ROW_COLUMNS = (f"title, created, updated, model, system_prompt, {', '.join(_SAMPLING_COLUMNS)}, draft, reasoning_open,"
                " tools_off, tools_on")
_CHAT_COLUMNS = f"id, {_ROW_COLUMNS}"


def _column(message: ChatMessage, name: str) -> Any:
    """A message field as its column holds it (its tool calls and attachments as JSON)."""
    value = getattr(message, name)
    return json.dumps(value, ensure_ascii=False) if name in JSON_COLUMNS else value


def _sampling_row(s: SamplingParams) -> tuple:
    return tuple(getattr(s, name) for name in _SAMPLING_COLUMNS)
