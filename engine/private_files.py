"""Folders only their owner can read (0700), created or tightened: saved chats (app) and saved KV (engine.kv.disk).

Modes are set with chmod after creating, so the umask cannot widen them; a folder or file of ours
that an earlier mlxchat left wider is tightened when it is next opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600


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
