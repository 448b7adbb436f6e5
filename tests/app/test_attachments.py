"""Attachments without the app: reading a file or refusing it with the reason, the fence, the listing's .gitignore
rules, the message as the model reads it, and exports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.export import to_json, to_markdown
from mlxchat.app.files.attachments import Attachment, AttachmentError, read_attachment
from mlxchat.app.files.listing import files_under
from mlxchat.app.files.slot_fit import over_the_slot


def refusal(path: Path, max_kb: int = 64) -> str:
    with pytest.raises(AttachmentError) as refused:
        read_attachment(path, max_kb, path.parent, "now")
    return str(refused.value)


def test_each_file_that_cannot_be_attached_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    assert refusal(tmp_path / "latin1.txt") == (
        "latin1.txt is not UTF-8 text (byte 0xe9 at offset 3): save it as UTF-8 to attach it")
    (tmp_path / "blob.bin").write_bytes(b"abc\0def")
    assert refusal(tmp_path / "blob.bin") == "blob.bin is a binary file: only text files can be attached"
    (tmp_path / "large.txt").write_text("x" * 3000)
    assert refusal(tmp_path / "large.txt", max_kb=2) == (
        "large.txt is 2.9 KiB, over attach_max_kb = 2 KiB: raise it in the config, or attach a part of the file")
    assert refusal(tmp_path / "gone.txt") == "gone.txt no longer exists: pick it again where it is now"
    (tmp_path / "sub").mkdir()
    assert refusal(tmp_path / "sub") == "sub is a folder: pick a file in it"
    if os.geteuid() != 0:  # (root reads anything)
        (tmp_path / "locked.txt").write_text("x")
        (tmp_path / "locked.txt").chmod(0)
        assert refusal(tmp_path / "locked.txt") == "locked.txt cannot be read: permission denied"


def test_a_file_is_read_whole_and_fenced_beyond_its_own_fences(tmp_path: Path) -> None:
    (tmp_path / "doc.md").write_bytes("\ufeffIntro\n```py\nx = 1\n```\n".encode())  # a BOM, and a fence inside
    attached = read_attachment(tmp_path / "doc.md", 64, tmp_path, "2026-11-26T10:00:00.000+00:00")
    assert (attached.name, attached.size, attached.text) == ("doc.md", 25, "Intro\n```py\nx = 1\n```\n")
    assert attached.fenced() == "doc.md\n````\nIntro\n```py\nx = 1\n```\n````"
    assert read_attachment(tmp_path / "doc.md", 64, tmp_path.parent, "now").name == f"{tmp_path.name}/doc.md"


def test_the_listing_follows_gitignore_files_at_every_level(tmp_path: Path) -> None:
    for name in ("a.py", "build/out.o", "src/b.py", "src/gen/c.py", "src/keep.tmp", "x.tmp", ".git/HEAD"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / ".gitignore").write_text("build/\n*.tmp\n")
    (tmp_path / "src" / ".gitignore").write_text("gen/\n!keep.tmp\n")
    assert files_under(tmp_path) == [".gitignore", "a.py", "src/.gitignore", "src/b.py", "src/keep.tmp"]
    assert files_under(tmp_path, limit=2) == [".gitignore", "a.py"]


def test_a_folders_gitignore_applies_to_every_file_below_it_as_git_says(tmp_path: Path) -> None:
    files = ("a.py", "debug.log", "src/b.py", "src/trace.log", "src/deep/c.log", "src/deep/d.py", "src/cache/e.py",
             "src/deep/cache/f.py", "docs/g.md")
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    # Patterns without a slash match at any depth below the .gitignore's folder; `cache/` only folders.
    (tmp_path / ".gitignore").write_text("*.log\ncache/\n")
    (tmp_path / "src" / ".gitignore").write_text("!deep/c.log\n")  # a deeper file takes one back
    want = [".gitignore", "a.py", "docs/g.md", "src/.gitignore", "src/b.py", "src/deep/c.log", "src/deep/d.py"]
    assert files_under(tmp_path) == want
    if shutil.which("git"):  # the same list as git's own
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        listed = subprocess.run(["git", "-C", str(tmp_path), "ls-files", "--others", "--exclude-standard"],
                                check=True, capture_output=True, text=True).stdout.split()
        assert sorted(listed) == sorted(want)


def test_the_model_reads_the_files_before_the_text_and_exports_show_them() -> None:
    notes = Attachment("notes.md", "/w/notes.md", 12, "Buy milk.\n", "2026-11-26T10:00:00.000+00:00", 5)
    chat = Chat(1, title="Files")
    chat.add("user", "What should I buy?", [notes.record()])
    chat.add("assistant", "Milk.", model="tiny-llama")
    assert chat.prompt()[0]["content"] == "notes.md\n```\nBuy milk.\n```\n\nWhat should I buy?"
    markdown = to_markdown(chat)
    assert ("**Attached** `notes.md` (12 B · 5 tokens, 2026-11-26T10:00:00.000+00:00)\n\n```\nBuy milk.\n```"
            in markdown)
    assert "*written by tiny-llama*" in markdown
    user, reply = json.loads(to_json(chat))["messages"]
    assert user["attachments"] == [notes.record()] and reply["model"] == "tiny-llama"


def test_a_message_over_the_slot_says_by_how_much_and_what_would_fit() -> None:
    big = Attachment("big.txt", "/w/big.txt", 9000, "…", "now", 1500)
    assert over_the_slot(900, 64, 1024, 4096, [big]) is None
    said = over_the_slot(2000, 64, 1024, 4096, [big])
    assert said == ("this message does not fit its slot: the chat would take 2,000 tokens and 64 more for the reply, "
                    "1,040 over the slot's 1,024. It would fit with a slot of 2,064 tokens or more (F2: a bigger "
                    "total context), or at most 1 slot of the 4,096 tokens (F2), or about 460 tokens of big.txt "
                    "(30% of it) instead of all.")
