"""Files only their owner can read: the chat data folder (0700), the database and its WAL files, exports, images and
the folder of saved KV the engine writes in (0600).

Modes are set with chmod after creating, so the umask cannot widen them; a folder or file of ours
that an earlier mlxchat left wider is tightened when it is next opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
DB_SUFFIXES = ("", "-wal", "-shm")  # the database and the files SQLite keeps beside it in WAL mode


def private_database(path: Path) -> None:
    """Makes the database file (created empty if missing: SQLite takes an empty file as a new database) and
    the WAL files beside it owner-only.

    SQLite creates the WAL and shared-memory files with the database file's own mode, so a 0600
    database keeps them 0600 too; the ones an older mlxchat left wider are tightened here.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, FILE_MODE)
    except FileExistsError:
        pass
    else:
        os.fchmod(fd, FILE_MODE)  # exactly: the umask may have taken more than group and others
        os.close(fd)
    for suffix in DB_SUFFIXES:
        tighten(path.with_name(path.name + suffix))


def write_private(path: Path, text: str | bytes) -> None:
    """Writes `text` (UTF-8, or bytes as they are) to `path`, which only its owner can read, whatever it was before."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, FILE_MODE)  # an existing file keeps its mode through O_CREAT: set it
        file.write(text.encode("utf-8") if isinstance(text, str) else text)


def private_folder(path: Path) -> None:
    """Creates `path` (and its parents) if missing, readable by its owner only; tightens it if it is ours."""
    path.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    tighten(path)


def tighten(path: Path) -> None:
    """Takes group's and others' access away from `path` when it is ours; another user's is left as it is."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == os.geteuid() and mode & 0o077:
        path.chmod(mode & ~0o077)
