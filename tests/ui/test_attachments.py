"""Files into a chat through Pilot: `@` opens the picker in the message box's place, typing filters it, a pick
becomes a chip with its tokens, alt+d takes it off; a sent file reaches the slot's prompt fenced and named; a file
too big for the slot, or a binary one, is refused with the message and its files kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.attachment_tray import AttachmentChip
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.widgets.file_picker import FilePicker
from tests.counts import chat_counter
from tests.pilot import make_app, notes, ready, run, send, slot_read, wait_for

NOTES = "The launch code is 4471.\nKeep it in the drawer.\n"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a few files, one of them ignored by its .gitignore."""
    folder = tmp_path / "work"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "notes.md").write_text(NOTES)
    (folder / "docs" / "plan.txt").write_text("Step one.\n")
    (folder / "secret.log").write_text("ignored\n")
    (folder / ".gitignore").write_text("*.log\n")
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (folder / "big.txt").write_text("word " * 4000)  # 20 KB: under attach_max_kb, far over a 1,024-token slot
    monkeypatch.chdir(folder)
    return folder


def picker(pane: ChatPane) -> FilePicker:
    return pane.query_one(FilePicker)


def listed(pane: ChatPane) -> list[str]:
    options = picker(pane).query_one(OptionList)
    return [str(options.get_option_at_index(i).id) for i in range(options.option_count)]


def chips(pane: ChatPane) -> list[str]:
    return [str(chip.render()) for chip in pane.query(AttachmentChip).results(AttachmentChip)]


def toasts(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def attach(pilot: Pilot, pane: ChatPane, typed: str) -> None:
    """Types @, then `typed` in the picker's filter, then enter."""
    pane.focus_input()
    await pilot.press("@")
    await wait_for(pilot, lambda: picker(pane).is_open, "the picker")
    picker(pane).query_one(Input).value = typed
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


def test_keys_typed_after_the_at_before_the_picker_opens_filter_it(tiny_model_dir: Path, workdir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        pane.focus_input()
        # As a terminal delivers a fast typist's (or tmux's) keys: all queued before the picker opens.
        for key, character in (("at", "@"), ("n", "n"), ("o", "o"), ("t", "t")):
            app.post_message(events.Key(key, character))
        await wait_for(pilot, lambda: picker(pane).is_open, "the picker")
        await pilot.pause()
        assert picker(pane).query_one(Input).value == "not" and listed(pane) == ["docs/notes.md"]
        await pilot.press("enter")
        assert [a.name for a in pane.attacher.attachments] == ["docs/notes.md"] and pane.chat_input.text == ""
        await pilot.press("h", "i")  # the box types again
        assert pane.chat_input.text == "hi"

    run(make_app(tiny_model_dir), scenario)


def test_the_picker_filters_a_chip_shows_and_goes_and_the_file_reaches_the_prompt(tiny_model_dir: Path,
                                                                                 workdir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        pane.chat_input.text = "Read this: "
        pane.chat_input.move_cursor(pane.chat_input.document.end)
        await pilot.press("@")
        await wait_for(pilot, lambda: picker(pane).is_open, "the picker")
        assert not pane.chat_input.display  # in the message box's place
        # Every file but the ignored one, the folder's own first.
        assert listed(pane) == [".gitignore", "big.txt", "picture.png", "docs/notes.md", "docs/plan.txt"]
        await pilot.press("n", "o", "t")
        assert listed(pane) == ["docs/notes.md"]
        await pilot.press("escape")  # back to the box, with the @ typed after what was there
        assert pane.chat_input.display and pane.chat_input.text == "Read this: @"
        pane.chat_input.text = "Read this: "
        await attach(pilot, pane, "plan")
        await attach(pilot, pane, "notes")
        # Its tokens in the message, as transformers counts them (the file fenced and named, as the prompt shows it).
        count = chat_counter(tiny_model_dir)
        tokens = count([{"role": "user", "content": f"docs/notes.md\n```\n{NOTES}```"}]) - count([{"role": "user",
                                                                                                 "content": ""}])
        assert chips(pane) == ["@docs/plan.txt · 10 B · " + chips(pane)[0].split(" · ")[2],
                               f"@docs/notes.md · {len(NOTES)} B · {tokens} tokens ✕"]
        await pilot.press("alt+d")  # the last one goes
        assert [a.name for a in pane.attacher.attachments] == ["docs/plan.txt"]
        await attach(pilot, pane, "notes")
        await send(pilot, pane, "What is the launch code?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert chips(pane) == [] and pane.chat_input.text == ""
        prompt = slot_read(app, 0)
        assert f"docs/notes.md\n```\n{NOTES}```" in prompt and "docs/plan.txt\n```\nStep one.\n```" in prompt
        assert prompt.index("docs/notes.md") < prompt.index("What is the launch code?")
        turn = str(pane.view.user_turn(0).render())
        assert turn.startswith("What is the launch code?\n@docs/plan.txt · 10 B") and "@docs/notes.md" in turn
        saved = ChatStore.open_for_app(None)[0].load(pane.chat.id)
        assert saved is not None
        [sent] = [m for m in saved.messages if m.role == "user"]
        assert [(a["name"], a["text"], a["size"]) for a in sent.attachments] == [
            ("docs/plan.txt", "Step one.\n", 10), ("docs/notes.md", NOTES, len(NOTES))]
        assert all(a["attached"] and a["path"].startswith(str(workdir)) for a in sent.attachments)
        await pilot.press("ctrl+g")  # editing the message brings its files back with its text
        assert pane.chat_input.text == "What is the launch code?"
        assert [a.name for a in pane.attacher.attachments] == ["docs/plan.txt", "docs/notes.md"]

    run(make_app(tiny_model_dir), scenario)


def test_a_file_too_big_for_the_slot_is_refused_and_the_message_stays(tiny_model_dir: Path, workdir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "big")
        assert [a.name for a in pane.attacher.attachments] == ["big.txt"]
        await send(pilot, pane, "Summarize it")
        assert not pane.busy and pane.chat.messages == []
        assert pane.chat_input.text == "Summarize it" and [a.name for a in pane.attacher.attachments] == ["big.txt"]
        [said] = notes(pane)
        assert said.startswith("Not sent: this message does not fit its slot") and "over the slot's 1,024" in said and "at most 1 slot" not in said  # (4,000 words: more than 2,048)
        # (no bigger slot offered: the tiny model was trained on 4,096 tokens, and the chat would take 20,000)
        assert "tokens of big.txt" in said and "a slot of" not in said

    run(make_app(tiny_model_dir), scenario)


def test_a_message_that_leaves_the_reply_under_64_tokens_of_the_slot_is_refused(tiny_model_dir: Path) -> None:
    per_slot, counter = 512, chat_counter(tiny_model_dir)

    def count(text: str) -> int:
        return counter([{"role": "user", "content": text}])

    words = 1
    while count(" ".join(f"w{i}" for i in range(words + 1))) < per_slot - 40:
        words += 1
        assert words < per_slot
    # A message that fits the slot alone, not with 64 tokens for the reply.
    text = " ".join(f"w{i}" for i in range(words + 1))
    needed = count(text)
    assert per_slot - 64 < needed < per_slot

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, text)
        assert not pane.busy and pane.chat.messages == [] and pane.chat_input.text == text
        [said] = notes(pane)
        assert said.startswith(f"Not sent: this message does not fit its slot: the chat would take {needed:,} tokens "
                               f"and 64 more for the reply, {needed + 64 - per_slot:,} over the slot's {per_slot}.")

    run(make_app(tiny_model_dir, parallel=1, ctx_size=per_slot), scenario)


def test_binary_and_oversized_files_are_refused_with_the_reason(tiny_model_dir: Path, workdir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        pane.chat_input.text = "kept "
        pane.chat_input.move_cursor(pane.chat_input.document.end)
        await attach(pilot, pane, "picture")
        assert any("picture.png is an image, and this model does not take images: alt+m" in t for t in toasts(app))
        assert picker(pane).is_open and pane.attacher.attachments == []  # pick another, or escape
        await attach_typed(pilot, pane, "big")
        assert any("big.txt is 19.5 KiB, over attach_max_kb = 8 KiB" in t for t in toasts(app))
        await pilot.press("escape")
        assert pane.chat_input.text == "kept @"

    run(make_app(tiny_model_dir, attach_max_kb=8), scenario)


async def attach_typed(pilot: Pilot, pane: ChatPane, typed: str) -> None:
    """Types `typed` in the open picker's filter, then enter."""
    picker(pane).query_one(Input).value = typed
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


def test_an_at_inside_a_word_is_typed_and_a_path_looks_elsewhere(tiny_model_dir: Path, workdir: Path,
                                                                  tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far.txt").write_text("far away\n")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        pane.chat_input.text = "me"
        pane.chat_input.move_cursor(pane.chat_input.document.end)
        await pilot.press("@", "x")
        assert pane.chat_input.text == "me@x" and not picker(pane).is_open
        pane.chat_input.text = ""
        await pilot.press("@")
        await pilot.press("ctrl+u")  # the folder above the working one
        assert "elsewhere/far.txt" in listed(pane)
        picker(pane).query_one(Input).value = f"{elsewhere}/"  # a path: what is under it
        await pilot.pause()
        assert listed(pane) == ["far.txt"]
        await pilot.press("enter")
        assert [a.name for a in pane.attacher.attachments] == [str(elsewhere / "far.txt")]

    run(make_app(tiny_model_dir), scenario)
