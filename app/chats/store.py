"""Saved chats: an SQLite database (WAL) of chats and their messages, with schema migrations.

The UI thread owns the one connection. What a pane holds in memory (a Chat) is the truth until it
is saved: a save that fails raises StoreWriteError and leaves the unsaved parts marked, so the
next save writes them again.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from mlxchat.app.chats.private import private_database, private_folder
from mlxchat.app.paths import default_db_path
from mlxchat.engine.events import SamplingParams

Role = Literal["user", "assistant"]
TITLE_CHARS = 60  # a title taken from the first user message is cut to this
EXCERPT_BEFORE = 30  # a search result shows this many characters before its match
EXCERPT_CHARS = 90  # and this many in all

# MIGRATIONS[n] takes a database from schema version n to n + 1 (PRAGMA user_version; 0 is empty).
# Steps are only ever appended: a released database may be at any of these versions.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: chats and their messages.
    (
        """CREATE TABLE chats (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            system_prompt TEXT NOT NULL DEFAULT '',
            temperature REAL NOT NULL,
            top_p REAL NOT NULL,
            top_k INTEGER NOT NULL,
            max_tokens INTEGER NOT NULL,
            seed INTEGER
        )""",
        """CREATE TABLE messages (
            chat_id INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            text TEXT NOT NULL,
            finish_reason TEXT,
            prompt_tokens INTEGER,
            generated_tokens INTEGER,
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            PRIMARY KEY (chat_id, seq)
        )""",
    ),
    # 2: which chats are open in tabs, in what order, and which one has focus.
    (
        "ALTER TABLE chats ADD COLUMN tab_position INTEGER",
        "ALTER TABLE chats ADD COLUMN focused INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX chats_by_update ON chats (updated)",
    ),
    # 3: open tabs by session (one running mlxchat), so that two on one database keep their own.
    (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            seen TEXT NOT NULL,
            ended TEXT
        )""",
        """CREATE TABLE open_tabs (
            session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            chat_id INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            focused INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session, chat_id)
        )""",
        # The tabs recorded before become an ended session's: the next launch reopens them.
        "INSERT INTO sessions (id, host, pid, seen, ended) SELECT 'schema-2', '', 0, last, last"
        " FROM (SELECT max(updated) AS last FROM chats WHERE tab_position IS NOT NULL) WHERE last IS NOT NULL",
        "INSERT INTO open_tabs (session, chat_id, position, focused)"
        " SELECT 'schema-2', id, tab_position, focused FROM chats WHERE tab_position IS NOT NULL",
        "ALTER TABLE chats DROP COLUMN tab_position",
        "ALTER TABLE chats DROP COLUMN focused",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
# A session not seen for this long counts as ended, even where its pid runs (reused by another
# program, or on another host sharing the folder): the next launch takes its tabs over.
LEASE_S = 600.0
KEEP_ALIVE_S = 60.0  # how often a running app says that it still is
# SQLite's own words for a file that is not, or no longer, a database: only these set a file aside.
_UNREADABLE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


class StoreError(Exception):
    """The chat database cannot be used; the message says why and is fit to show as it is."""


class StoreWriteError(StoreError):
    """A save failed (disk full, read-only, locked): what was not written is kept to be saved again."""


class _Unusable(Exception):
    """A database file that must not be touched: damaged, or from a newer mlxchat."""

    def __init__(self, reason: str, tag: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tag = tag


def now() -> str:
    """The time as stored: ISO 8601, UTC, to the millisecond (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def local_time(stamp: str) -> str:
    """A stored time as the user reads it: local, to the minute."""
    return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")


@dataclass
class ChatMessage:
    """One turn of a chat; `saved` is False while the database lacks its latest text."""

    role: Role
    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    created: str = field(default_factory=now)
    updated: str = ""
    saved: bool = False

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created


@dataclass
class Chat:
    """A conversation with its own settings; `id` is None until it is first saved."""

    id: int | None
    title: str = ""
    model: str = ""
    system_prompt: str = ""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    messages: list[ChatMessage] = field(default_factory=list)
    created: str = field(default_factory=now)
    updated: str = ""
    saved: bool = False  # whether the chats row holds the fields above

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created

    def add(self, role: Role, text: str) -> ChatMessage:
        """Appends a turn; the first user message names an untitled chat."""
        message = ChatMessage(role, text)
        self.messages.append(message)
        if role == "user" and not self.title:
            self.title = title_from(text)
        self.touch()
        return message

    def touch(self) -> None:
        """Marks the chat changed now (its row is saved again with the next save)."""
        self.updated = now()
        self.saved = False

    def prompt(self) -> list[dict[str, str]]:
        """The conversation as the engine's chat template takes it: the system prompt, then every turn."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": m.role, "content": m.text} for m in self.messages]


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


def title_from(text: str) -> str:
    """A chat title from a message: its first non-empty line, cut to TITLE_CHARS."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class ChatStore:
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
                   *_sampling_row(chat.sampling))
            chat_id = chat.id
            if chat_id is None:
                chat_id = db.execute(
                    "INSERT INTO chats (title, created, updated, model, system_prompt,"
                    " temperature, top_p, top_k, max_tokens, seed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                ).lastrowid
            elif not chat.saved:
                db.execute(
                    "UPDATE chats SET title = ?, created = ?, updated = ?, model = ?, system_prompt = ?,"
                    " temperature = ?, top_p = ?, top_k = ?, max_tokens = ?, seed = ? WHERE id = ?",
                    (*row, chat_id),
                )
            # Turns removed in memory (regenerate, edit and resend) go from the database too.
            db.execute("DELETE FROM messages WHERE chat_id = ? AND seq >= ?", (chat_id, len(chat.messages)))
            unsaved = [(seq, m) for seq, m in enumerate(chat.messages) if not m.saved]
            db.executemany(
                "INSERT OR REPLACE INTO messages (chat_id, seq, role, text, finish_reason, prompt_tokens,"
                " generated_tokens, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(chat_id, seq, m.role, m.text, m.finish_reason, m.prompt_tokens, m.generated_tokens,
                  m.created, m.updated) for seq, m in unsaved],
            )
        chat.id, chat.saved = chat_id, True
        for _, message in unsaved:
            message.saved = True

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
            running = _running_sessions(db) - {self.session}
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

    def rename(self, chat_id: int, title: str) -> None:
        """Gives a chat a new title."""
        with self._write() as db:
            db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def delete(self, chat_id: int) -> None:
        """Deletes a chat and its messages."""
        with self._write() as db:
            db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # ---- reading ----

    def load(self, chat_id: int) -> Chat | None:
        """A chat with its messages, or None when there is no chat `chat_id`."""
        row = self._db.execute(f"SELECT {_CHAT_COLUMNS} FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return None if row is None else self._chat(row)

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
        running = _running_sessions(self._db)
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

    def _chat(self, row: tuple) -> Chat:
        chat_id, title, created, updated, model, system_prompt, temperature, top_p, top_k, max_tokens, seed = row
        messages = [
            ChatMessage(role, text, finish, prompt, generated, m_created, m_updated, saved=True)
            for role, text, finish, prompt, generated, m_created, m_updated in self._db.execute(
                "SELECT role, text, finish_reason, prompt_tokens, generated_tokens, created, updated"
                " FROM messages WHERE chat_id = ? ORDER BY seq",
                (chat_id,),
            )
        ]
        sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                                  seed=seed)
        return Chat(chat_id, title, model, system_prompt, sampling, messages, created, updated, saved=True)


_CHAT_COLUMNS = "id, title, created, updated, model, system_prompt, temperature, top_p, top_k, max_tokens, seed"


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


def _running_sessions(db: sqlite3.Connection) -> set[str]:
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


def _sampling_row(s: SamplingParams) -> tuple[float, float, int, int, int | None]:
    return s.temperature, s.top_p, s.top_k, s.max_tokens, s.seed


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to a checked, migrated database at `path` (created if missing).

    Raises _Unusable for a damaged file or one from a newer schema, StoreError for anything else.
    """
    try:
        private_database(path)
        # Autocommit: transactions are explicit (BEGIN ... COMMIT), migrations included.
        db = sqlite3.connect(path, isolation_level=None)
    except OSError as exc:
        raise StoreError(f"cannot open {path}: {exc.strerror}") from None
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from None
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise _Unusable(
                f"was written by a newer mlxchat (schema version {version}; this one reads up to {SCHEMA_VERSION})",
                "newer",
            )
        problem = db.execute("PRAGMA quick_check(1)").fetchone()[0]
        if problem != "ok":
            raise _Unusable(f"is damaged ({' '.join(problem.split())})", "damaged")
        db.execute("PRAGMA journal_mode = WAL")
        # With WAL, NORMAL loses nothing when the process dies (kill -9), only on power loss.
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
    except _Unusable:
        db.close()
        raise
    except sqlite3.Error as exc:
        db.close()
        if getattr(exc, "sqlite_errorname", "") in _UNREADABLE:
            raise _Unusable(f"is not a readable chat database ({exc})", "unreadable") from None
        raise StoreError(f"cannot use {path}: {exc}") from None
    return db


def migrate(db: sqlite3.Connection, target: int = SCHEMA_VERSION) -> None:
    """Brings the database up to schema version `target`, one step per transaction."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for step in range(version, target):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[step]:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {step + 1}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


def _set_aside(path: Path, tag: str) -> Path:
    """Renames the database (and its WAL files, which belong to it) out of the way; returns its new path."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.{tag}-{stamp}")
    try:
        for suffix in ("-wal", "-shm", ""):
            source = path.with_name(path.name + suffix)
            if source.exists():
                source.rename(aside.with_name(aside.name + suffix))
    except OSError as exc:
        raise StoreError(f"cannot move {path} aside: {exc.strerror}") from None
    return aside
