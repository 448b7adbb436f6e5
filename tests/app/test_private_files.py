"""Chats are private: the data folder is 0700, the database and its WAL files 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.app.chats.private import write_private
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def test_a_new_database_is_owner_only_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "share" / "mlxchat" / "chats.db"
    store, _ = ChatStore.open_for_app(path)
    store.save(Chat(None, title="secret"))  # a write: SQLite has made its WAL and shared-memory files
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    assert wal.exists() and shm.exists()
    assert [mode(p) for p in (path.parent, path, wal, shm)] == [0o700, 0o600, 0o600, 0o600]
    store.close()


def test_an_existing_wide_folder_and_database_are_tightened_on_open(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "mlxchat" / "chats.db"
    store, _ = ChatStore.open_for_app(path)
    store.save(Chat(None, title="kept"))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.chmod(0o644)  # as an mlxchat before this change left them
    path.parent.chmod(0o755)
    other, _ = ChatStore.open_for_app(path)
    assert mode(path.parent) == 0o700
    assert [mode(path.with_name(path.name + s)) for s in ("", "-wal", "-shm")] == [0o600] * 3
    assert [c.title for c in other.list_chats()] == ["kept"]  # tightened, not replaced
    store.close()
    other.close()


def test_an_existing_database_opened_by_the_command_line_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    ChatStore.open_for_app(path)[0].close()
    path.chmod(0o664)
    ChatStore.open_existing(path).close()
    assert mode(path) == 0o600


def test_exports_are_owner_only_even_over_a_wider_file(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "chat.md"
    write_private(path, "# new\n")
    assert mode(path) == 0o600 and path.read_text() == "# new\n"
    path.chmod(0o666)
    write_private(path, "# again\n")
    assert mode(path) == 0o600 and path.read_text() == "# again\n"


def test_the_saved_kv_folder_the_engine_writes_in_is_owner_only(tmp_path: Path, tiny_model_dir: Path, umask: int) -> None:
    """The app's start makes the folder of saved KV private (the engine only writes under it), a wide one tightened."""
    from mlxchat.app import paths
    from mlxchat.app.config.loading import load_settings
    from mlxchat.app.session.start import start_engine
    from mlxchat.engine import retire

    kv = paths.kv_cache_dir()  # (the test's own: conftest)
    kv.mkdir(parents=True, mode=0o755)
    kv.chmod(0o755)  # as a wider folder left by an earlier run
    started = start_engine(load_settings(None, {"model": str(tiny_model_dir)}), lambda _: None)
    try:
        assert mode(kv) == 0o700 and [mode(p) for p in kv.iterdir()] == [0o700]  # and the model's own folder
    finally:
        retire(started.engine)
