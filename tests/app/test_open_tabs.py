"""Open tabs by session: two mlxchats on one database keep their own; a launch reopens those of ended ones."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlxchat.app.chats import tabs as tabs_module
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.schema import migrate
from mlxchat.app.chats.store import ChatStore

REPO = Path(__file__).resolve().parents[2]

# Another mlxchat process: records its tabs (the ids in argv[2], the first focused), then runs on.
OTHER_PROCESS = """
import sys, time
from pathlib import Path
from mlxchat.app.chats.store import ChatStore
store, _ = ChatStore.open_for_app(Path(sys.argv[1]))
store.claim_open_chats()
ids = [int(i) for i in sys.argv[2].split(",")]
store.set_open(ids, ids[0])
print("recorded", flush=True)
time.sleep(120)
"""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "chats.db"


def launch(path: Path) -> ChatStore:
    return ChatStore.open_for_app(path)[0]


def saved_chats(store: ChatStore, *titles: str) -> list[int]:
    ids = []
    for title in titles:
        chat = Chat(None, title=title)
        store.save(chat)
        assert chat.id is not None
        ids.append(chat.id)
    return ids


def titles(chats: list[Chat]) -> list[str]:
    return [chat.title for chat in chats]


@pytest.fixture
def other_process(db_path: Path) -> Iterator[Callable[[list[int]], subprocess.Popen[str]]]:
    """Starts other processes that record the given tabs and run on; killed at the test's end."""
    children: list[subprocess.Popen[str]] = []

    def start(ids: list[int]) -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(db_path), ",".join(map(str, ids))],
                                 cwd=REPO, stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout is not None and child.stdout.readline() == "recorded\n"
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()


def test_two_processes_keep_their_own_tabs_and_a_launch_reopens_only_those_that_ended(db_path: Path) -> None:
    first, second = launch(db_path), launch(db_path)
    a1, a2, b1 = saved_chats(first, "a1", "a2", "b1")
    first.claim_open_chats()
    second.claim_open_chats()
    first.set_open([a1, a2], focused=a2)
    second.set_open([b1], focused=b1)
    first.set_open([a2, a1], focused=a2)  # the first moves its tabs: the second's stay recorded

    listed = {c.title: (c.open, c.open_here) for c in first.list_chats()}
    assert listed == {"a1": (True, True), "a2": (True, True), "b1": (True, False)}

    first.close()  # quits: its tabs are for the next launch, the second's are not
    third = launch(db_path)
    chats, focused = third.claim_open_chats()
    assert titles(chats) == ["a2", "a1"] and focused == a2

    fourth = launch(db_path)
    assert fourth.claim_open_chats() == ([], None)  # the first's were taken, the second still runs

    second.close()
    chats, focused = fourth.claim_open_chats()
    assert titles(chats) == ["b1"] and focused == b1
    for store in (third, fourth):
        store.close()


def test_the_tabs_of_a_process_killed_with_9_come_back_not_those_of_one_running(
    db_path: Path, other_process: Callable[[list[int]], subprocess.Popen[str]]
) -> None:
    store = launch(db_path)
    killed_tab, running_tab, mine = saved_chats(store, "killed", "running", "mine")
    store.set_open([mine], focused=mine)
    killed = other_process([killed_tab])
    running = other_process([running_tab])
    store.close()

    launched = launch(db_path)
    chats, _ = launched.claim_open_chats()
    assert titles(chats) == ["mine"]  # the two other processes still run: their tabs are theirs
    killed.send_signal(signal.SIGKILL)
    killed.wait()

    again = launch(db_path)
    chats, focused = again.claim_open_chats()
    assert titles(chats) == ["killed"] and focused == killed_tab
    assert {c.title for c in again.list_chats() if c.open} == {"running", "killed", "mine"}
    assert running.poll() is None
    for s in (launched, again):
        s.close()


def test_a_chat_open_in_a_running_process_is_not_reopened_from_an_ended_one(db_path: Path) -> None:
    ended, running = launch(db_path), launch(db_path)
    shared, own = saved_chats(ended, "shared", "own")
    ended.set_open([shared, own], focused=shared)
    running.set_open([shared], focused=shared)
    ended.close()
    chats, focused = launch(db_path).claim_open_chats()
    assert titles(chats) == ["own"] and focused is None


def test_a_session_past_its_lease_is_taken_over_and_its_keep_alive_takes_it_back(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    silent = launch(db_path)  # a process stopped (ctrl+z), or one whose pid another program now has
    (chat,) = saved_chats(silent, "quiet")
    silent.set_open([chat], focused=chat)
    assert launch(db_path).claim_open_chats() == ([], None)  # within its lease: still running
    lease = tabs_module.LEASE_S
    monkeypatch.setattr(tabs_module, "LEASE_S", 0.0)  # (its lease, seen from after it ran out)
    chats, _ = launch(db_path).claim_open_chats()
    assert titles(chats) == ["quiet"]
    monkeypatch.setattr(tabs_module, "LEASE_S", lease)

    fresh = launch(db_path)
    silent.keep_alive()  # it resumes: its session runs again, and records its tabs again
    silent.set_open([chat], focused=chat)
    assert fresh.claim_open_chats() == ([], None)


def test_tabs_recorded_by_schema_2_are_reopened_after_the_migration(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db = sqlite3.connect(db_path, isolation_level=None)
    migrate(db, target=2)
    for chat_id, position, focused in ((7, 1, 1), (8, 0, 0), (9, None, 0)):
        db.execute(
            "INSERT INTO chats (id, title, created, updated, temperature, top_p, top_k, max_tokens,"
            " tab_position, focused) VALUES (?, ?, '2025-01-01T00:00:00.000+00:00',"
            " '2025-01-01T00:00:00.000+00:00', 0.7, 0.95, 40, 1024, ?, ?)",
            (chat_id, f"chat {chat_id}", position, focused),
        )
    db.close()
    chats, focused = launch(db_path).claim_open_chats()
    assert titles(chats) == ["chat 8", "chat 7"] and focused == 7
