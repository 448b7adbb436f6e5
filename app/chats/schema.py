"""The chat database file: its schema, migrations keyed on PRAGMA user_version, and opening it safely."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

from mlxchat.app.chats.errors import StoreError
from mlxchat.app.chats.private import private_database

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
    # 4: each reply's timings, as llama-server's `timings`: prompt tokens taken from cache (and from
    # where: slot, memory, disk), time to first token, decode speed.
    (
        "ALTER TABLE messages ADD COLUMN cached_tokens INTEGER",
        "ALTER TABLE messages ADD COLUMN cached_from TEXT",
        "ALTER TABLE messages ADD COLUMN ttft_ms REAL",
        "ALTER TABLE messages ADD COLUMN decode_tok_s REAL",
    ),
    # 5: what a chat's message box held, unsent, when mlxchat quit.
    ("ALTER TABLE chats ADD COLUMN draft TEXT NOT NULL DEFAULT ''",),
    # 6: reasoning. Each reply's, apart from its answer (its text, tokens, duration); each chat's thinking
    # switch and reasoning budget (NULL: none), and whether its reasoning blocks show open.
    (
        "ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE messages ADD COLUMN reasoning_tokens INTEGER",
        "ALTER TABLE messages ADD COLUMN reasoning_ms REAL",
        "ALTER TABLE chats ADD COLUMN thinking INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE chats ADD COLUMN reasoning_budget INTEGER",
        "ALTER TABLE chats ADD COLUMN reasoning_open INTEGER NOT NULL DEFAULT 0",
    ),
    # 7: the tool calls a reply ended with and their results (JSON: a list of objects).
    ("ALTER TABLE messages ADD COLUMN tool_calls TEXT NOT NULL DEFAULT '[]'",),
    # 8: the tools a chat's replies may not call (JSON: "server/tool" names).
    ("ALTER TABLE chats ADD COLUMN tools_off TEXT NOT NULL DEFAULT '[]'",),
    # 9: the files a user message was sent with (JSON: name, path, size, text, when, tokens), and the model that
    # wrote each reply (the model can change while mlxchat runs).
    (
        "ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE messages ADD COLUMN model TEXT NOT NULL DEFAULT ''",
    ),
    # 10: the tools a chat offers that their server's `tools` leaves off (JSON: "server/tool" names).
    ("ALTER TABLE chats ADD COLUMN tools_on TEXT NOT NULL DEFAULT '[]'",),
    # 11: speculative decoding: each chat's setting ("off", "lookup"), each reply's drafted and accepted tokens.
    (
        "ALTER TABLE chats ADD COLUMN speculative TEXT NOT NULL DEFAULT 'off'",
        "ALTER TABLE messages ADD COLUMN drafted_tokens INTEGER",
        "ALTER TABLE messages ADD COLUMN accepted_tokens INTEGER",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
# SQLite's own words for a file that is not, or no longer, a database: only these set a file aside.
_UNREADABLE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


class _Unusable(Exception):
    """A database file that must not be touched: damaged, or from a newer mlxchat."""

    def __init__(self, reason: str, tag: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tag = tag


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
