"""The chat database: saving and loading, open tabs, search, migrations, unusable files, write errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlxchat.app.chats.errors import StoreError, StoreWriteError
from mlxchat.app.chats.chat import Chat, ChatMessage, title_from
from mlxchat.app.chats.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.paths import default_db_path
from mlxchat.engine.events import SamplingParams


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A database path of this test's own (the data dir is shared by the session)."""
    return tmp_path / "data" / "chats.db"


def open_store(path: Path) -> ChatStore:
    store, notice = ChatStore.open_for_app(path)
    assert notice is None
    return store


def a_chat(*turns: str, **fields: object) -> Chat:
    """A chat whose turns alternate user, assistant."""
    chat = Chat(None, model="tiny", system_prompt="Be brief.", **fields)  # type: ignore[arg-type]
    for i, text in enumerate(turns):
        chat.add("user" if i % 2 == 0 else "assistant", text)
    return chat


def test_default_path_is_under_xdg_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_path() == tmp_path / "mlxchat" / "chats.db"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # ignored, as the XDG spec says
    assert default_db_path() == Path.home() / ".local/share/mlxchat/chats.db"


def test_a_new_database_is_wal_at_the_latest_version(db_path: Path) -> None:
    open_store(db_path).close()
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 11


def test_a_chat_round_trips_with_its_settings_and_messages(db_path: Path) -> None:
    store = open_store(db_path)
    sampling = SamplingParams(temperature=0.3, top_p=0.9, top_k=20, max_tokens=99, seed=7, speculative="lookup")
    chat = a_chat("What is MLX?\nSecond line", "An array framework.", sampling=sampling, tools_off=["fs/write"],
                  tools_on=["fs/move"])
    reply = chat.messages[1]
    reply.finish_reason, reply.prompt_tokens, reply.generated_tokens = "stop", 12, 5
    reply.cached_tokens, reply.cached_from, reply.ttft_ms, reply.decode_tok_s = 9, "memory", 31.5, 14.25
    reply.drafted_tokens, reply.accepted_tokens = 4, 3
    store.save(chat)
    assert chat.id is not None and chat.saved and all(m.saved for m in chat.messages)
    store.close()

    loaded = open_store(db_path).load(chat.id)
    assert loaded is not None
    assert loaded.title == "What is MLX?"  # the first user message's first line
    assert (loaded.model, loaded.system_prompt, loaded.sampling) == ("tiny", "Be brief.", sampling)
    assert [(m.role, m.text) for m in loaded.messages] == [
        ("user", "What is MLX?\nSecond line"), ("assistant", "An array framework.")]
    assert (loaded.messages[1].finish_reason, loaded.messages[1].prompt_tokens,
            loaded.messages[1].generated_tokens) == ("stop", 12, 5)
    timings = loaded.messages[1]
    assert (timings.cached_tokens, timings.cached_from, timings.ttft_ms, timings.decode_tok_s) == (9, "memory", 31.5, 14.25)
    assert (timings.drafted_tokens, timings.accepted_tokens) == (4, 3)
    assert loaded.messages[0].created <= loaded.messages[1].created
    assert loaded.prompt()[0] == {"role": "system", "content": "Be brief."}
    assert (loaded.tools_off, loaded.tools_on) == (["fs/write"], ["fs/move"])


def test_a_replys_reasoning_is_saved_apart_from_its_answer_and_read_back(db_path: Path) -> None:
    store = open_store(db_path)
    chat = a_chat("Is 91 prime?", "No: 7 x 13.")
    reply = chat.messages[1]
    thought = "91 = 7 x 13, so it is not.\nCheck: 7 x 13 = 91."
    reply.reasoning, reply.reasoning_tokens, reply.reasoning_ms = thought, 17, 412.5
    store.save(chat)
    store.close()
    assert chat.id is not None
    loaded = open_store(db_path).load(chat.id)
    assert loaded is not None
    user, answer = loaded.messages
    assert (answer.text, answer.reasoning, answer.reasoning_tokens, answer.reasoning_ms) == (
        "No: 7 x 13.", thought, 17, 412.5)
    assert (user.reasoning, user.reasoning_tokens, user.reasoning_ms) == ("", None, None)


def test_saves_write_changed_messages_and_drop_removed_ones(db_path: Path) -> None:
    store = open_store(db_path)
    chat = a_chat("one", "two", "three", "four")
    store.save(chat)
    assert chat.id is not None
    # A reply growing as it streams, then a regenerate that drops the last two turns.
    chat.messages[1].text, chat.messages[1].saved = "two, longer", False
    del chat.messages[2:]
    store.save(chat)
    loaded = store.load(chat.id)
    assert loaded is not None and [m.text for m in loaded.messages] == ["one", "two, longer"]
    assert store.load(chat.id + 1) is None


def test_titles_come_from_the_first_line_and_are_cut() -> None:
    assert title_from("\n  hello there  \nmore") == "hello there"
    long = title_from("x" * 200)
    assert len(long) == 60 and long.endswith("…")


def test_open_tabs_and_focus_are_kept(db_path: Path) -> None:
    store = open_store(db_path)
    chats = [a_chat(f"chat {i}") for i in range(3)]
    for chat in chats:
        store.save(chat)
    ids = [chat.id for chat in chats]
    assert None not in ids
    store.set_open([ids[2], ids[0]], focused=ids[0])  # type: ignore[list-item]
    store.close()
    opened, focused = open_store(db_path).claim_open_chats()
    assert [c.id for c in opened] == [ids[2], ids[0]] and focused == ids[0]
    assert [c.messages[0].text for c in opened] == ["chat 2", "chat 0"]


def test_list_search_rename_and_delete(db_path: Path) -> None:
    store = open_store(db_path)
    cats, dogs, odd = a_chat("Tell me about cats", "Cats purr."), a_chat("Dogs?", "Dogs bark."), a_chat("100% _sure_")
    for chat in (cats, dogs, odd):
        store.save(chat)
    store.set_open([cats.id], focused=None)  # type: ignore[list-item]
    listed = store.list_chats()
    assert [c.id for c in listed] == [odd.id, dogs.id, cats.id]  # most recent first
    assert [(c.messages, c.open) for c in listed] == [(1, False), (2, False), (2, True)]
    assert [c.id for c in store.list_chats("PURR")] == [cats.id]  # message text, any case
    assert [c.id for c in store.list_chats("dogs")] == [dogs.id]
    # LIKE's wildcards are searched for as themselves.
    assert [c.id for c in store.list_chats("0%")] == [odd.id]
    assert [c.id for c in store.list_chats("_s")] == [odd.id]
    assert store.list_chats("nothing like this") == []
    store.rename(dogs.id, "Canines")  # type: ignore[arg-type]
    assert [c.id for c in store.list_chats("canines")] == [dogs.id]
    store.delete(cats.id)  # type: ignore[arg-type]
    assert store.load(cats.id) is None  # type: ignore[arg-type]
    raw = sqlite3.connect(db_path)
    assert raw.execute("SELECT count(*) FROM messages WHERE chat_id = ?", (cats.id,)).fetchone()[0] == 0


def test_a_version_1_database_is_migrated_with_its_chats(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db = sqlite3.connect(db_path, isolation_level=None)
    migrate(db, target=1)
    db.execute(
        "INSERT INTO chats (id, title, created, updated, model, system_prompt, temperature, top_p, top_k,"
        " max_tokens, seed) VALUES (5, 'Old', '2025-01-01T00:00:00.000+00:00', '2025-01-01T00:00:00.000+00:00',"
        " 'm', '', 0.7, 0.95, 40, 1024, NULL)"
    )
    db.execute(
        "INSERT INTO messages VALUES (5, 0, 'user', 'hi', NULL, NULL, NULL, '2025-01-01T00:00:00.000+00:00',"
        " '2025-01-01T00:00:00.000+00:00')"
    )
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.close()

    store = open_store(db_path)
    assert sqlite3.connect(db_path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    old = store.load(5)
    assert old is not None and old.title == "Old" and [m.text for m in old.messages] == ["hi"]
    # Columns added since come with their defaults: thinking on, no budget, no reasoning.
    assert (old.sampling.thinking, old.sampling.reasoning_budget, old.reasoning_open) == (True, None, False)
    assert (old.messages[0].reasoning, old.messages[0].reasoning_tokens) == ("", None)
    assert (old.messages[0].attachments, old.messages[0].model) == ([], "")  # schema 9: no files, model unknown
    assert store.claim_open_chats() == ([], None)  # v1 had no tabs: nothing is open
    store.set_open([5], focused=5)
    store.close()
    assert open_store(db_path).claim_open_chats()[1] == 5


def test_a_corrupt_file_is_set_aside_not_overwritten(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    garbage = b"this is not an SQLite database at all\n" * 200
    db_path.write_bytes(garbage)
    store, notice = ChatStore.open_for_app(db_path)
    (aside,) = [p for p in db_path.parent.iterdir() if ".unreadable-" in p.name]
    assert aside.read_bytes() == garbage
    assert notice is not None and str(db_path) in notice and str(aside) in notice
    assert "new chat database" in notice
    store.save(a_chat("a fresh start"))
    assert [c.title for c in store.list_chats()] == ["a fresh start"]


def test_a_damaged_database_is_set_aside(db_path: Path) -> None:
    store = open_store(db_path)
    for i in range(40):
        store.save(a_chat(f"chat {i} " + "words " * 200))
    store.close()
    sqlite3.connect(db_path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db_path.read_bytes())
    page = 4096
    data[2 * page : 6 * page] = b"\xff" * (4 * page)  # pages of the tables' b-trees
    db_path.write_bytes(bytes(data))
    store, notice = ChatStore.open_for_app(db_path)
    assert notice is not None and "moved to" in notice
    assert store.list_chats() == []


def test_a_newer_database_is_set_aside_by_the_app_and_refused_by_the_command_line(db_path: Path) -> None:
    open_store(db_path).close()
    sqlite3.connect(db_path).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer mlxchat"):
        ChatStore.open_existing(db_path)
    assert db_path.exists()  # reading from the command line moves nothing
    _, notice = ChatStore.open_for_app(db_path)
    assert notice is not None and f"schema version {SCHEMA_VERSION + 1}" in notice
    (aside,) = [p for p in db_path.parent.iterdir() if ".newer-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert sqlite3.connect(aside).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_open_existing_says_when_nothing_was_saved(db_path: Path) -> None:
    with pytest.raises(StoreError, match="no chats have been saved yet"):
        ChatStore.open_existing(db_path)


def test_a_data_folder_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create"):
        ChatStore.open_for_app(blocker / "mlxchat" / "chats.db")


def test_a_full_disk_keeps_the_unsaved_text_and_a_later_save_writes_it(db_path: Path) -> None:
    open_store(db_path).close()
    db = sqlite3.connect(db_path, isolation_level=None)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # as if the disk were full
    store = ChatStore(db, db_path)
    chat = a_chat("a question", "x" * 20000)
    with pytest.raises(StoreWriteError, match="could not save to .*full"):
        store.save(chat)
    assert chat.id is None and not any(m.saved for m in chat.messages)
    db.execute("PRAGMA max_page_count = 1000000")  # space again
    store.save(chat)
    assert chat.id is not None
    loaded = open_store(db_path).load(chat.id)
    assert loaded is not None and [len(m.text) for m in loaded.messages] == [10, 20000]


def test_a_read_only_database_raises_a_write_error(db_path: Path) -> None:
    store = open_store(db_path)
    chat = a_chat("saved")
    store.save(chat)
    store.close()
    read_only = ChatStore(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None), db_path)
    chat.add("assistant", "not saved")
    with pytest.raises(StoreWriteError, match="readonly"):
        read_only.save(chat)
    assert chat.messages[0].saved and not chat.messages[1].saved


def test_a_search_says_where_it_matched_with_the_text_around_it(db_path: Path) -> None:
    store = open_store(db_path)
    long = "word " * 30 + "the NEEDLE here " + "tail " * 30
    chat = a_chat("first question", "an answer", "second\nquestion", long)
    store.save(chat)
    (found,) = [c.found for c in store.list_chats("needle")]
    assert found is not None and found.where == "in reply 2"
    assert found.excerpt.startswith("…") and found.excerpt.endswith("…")
    assert found.excerpt[found.start : found.end] == "NEEDLE"
    (found,) = [c.found for c in store.list_chats("second")]
    assert found is not None and found.where == "in your message 2"
    assert found.excerpt == "second question"  # on one line
    (found,) = [c.found for c in store.list_chats("FIRST")]  # the title comes from the first message
    assert found is not None and found.where == "in the title"
    assert [c.found for c in store.list_chats()] == [None]


def test_a_reply_s_timings_line_says_what_was_drafted_and_accepted() -> None:
    from mlxchat.app.chats.conversation import timings_line

    reply = ChatMessage("assistant", "text", prompt_tokens=1000, generated_tokens=256, ttft_ms=900.0, decode_tok_s=61.5)
    assert "drafted" not in (timings_line(reply) or "")  # (a reply with no drafts, or from before speculation)
    reply.drafted_tokens, reply.accepted_tokens = 212, 171
    assert timings_line(reply) == ("prompt 1,000 tokens · first token 0.90 s · 256 tokens at 61.5 tok/s · "
                                   "drafted 212 · accepted 171 (81%)")
