"""The clock that draws streaming replies: every shown chat repainted each frame, endings shown a few at a time
while the engine writes, full garbage collections held off from the first reply until a moment after the last is
shown ended."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.workarounds.gc_hold import COLLECT_AFTER_S, HELD_THRESHOLD
from mlxchat.app.ui.reply_frames import CHANGES_PER_UPDATE, ReplyFrames
from tests.pilot import make_app, ready, run, submit, wait_for


class Chat:
    """A chat as the clock sees it, which notes the frames it was repainted in."""

    def __init__(self, shown: bool = True) -> None:
        self.busy, self.display, self.repainted, self.frames = True, shown, 0, 0
        self.awaiting_words = False

    def draw_frame(self, repaint: bool) -> None:
        self.frames += 1
        self.repainted += repaint


def test_each_frame_repaints_every_shown_chat_with_its_status_line(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        chats = [Chat(), Chat(), Chat(), Chat(shown=False)]
        statuses: list[list[Chat]] = []
        frames = ReplyFrames(app, lambda: chats, lambda shown: statuses.append(list(shown)), lambda: True)
        frames.wake()
        await wait_for(pilot, lambda: chats[0].frames >= 3, "three frames")
        for chat in chats:
            chat.busy = False
        frames.stop()
        assert len({chat.frames for chat in chats}) == 1  # every chat takes its text each frame
        assert [chat.repainted for chat in chats] == [chats[0].frames] * 3 + [0]  # (one out of view: when shown)
        assert statuses == [chats[:3]] * chats[0].frames  # their status lines with them, in the same frame

    run(make_app(tiny_model_dir), scenario)


@pytest.mark.parametrize("writing", [True, False])
def test_replies_that_end_together_are_shown_a_few_per_screen_update(tiny_model_dir: Path, writing: bool) -> None:
    """While the engine writes other replies, CHANGES_PER_UPDATE changes (one) are shown per screen update (keys are read
    between updates); once it writes none, all in one. Always in the order asked."""
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        frames = ReplyFrames(app, lambda: [], lambda _: None, lambda: writing)
        notes: list[Static] = []
        laid_out: list[bool] = []  # whether the screen had laid out the change before, when each came
        for number in range(5):
            async def ending(number: int = number) -> None:
                laid_out.append(bool(notes) and notes[-1].size.height > 0)
                notes.append(Static(f"reply {number} ended"))
                await pane.view.mount(notes[-1])
            frames.change(ending)
        await wait_for(pilot, lambda: len(notes) == 5 and notes[-1].size.height > 0, "five endings shown")
        assert [str(note.render()) for note in notes] == [f"reply {n} ended" for n in range(5)]
        # A change that starts a screen update of its own finds the one before it shown.
        assert laid_out == [False] + [writing and n % CHANGES_PER_UPDATE == 0 for n in range(1, 5)]

    run(make_app(tiny_model_dir), scenario)


def test_full_collections_wait_while_a_reply_streams_and_run_a_moment_after_it_is_shown_ended(
    endless_model_dir: Path,
) -> None:
    before = gc.get_threshold()
    assert before[2] != HELD_THRESHOLD

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await submit(pilot, pane, "Hello")
        await wait_for(pilot, lambda: pane.reply_text != "", "the reply to stream")
        assert pane.busy and gc.get_threshold() == (before[0], before[1], HELD_THRESHOLD)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not pane.busy, "the stopped reply")
        ended = time.monotonic()
        assert gc.get_threshold()[2] == HELD_THRESHOLD  # (not at the moment it is shown ended)
        await wait_for(pilot, lambda: gc.get_threshold() == before, "full collections to run again")
        assert time.monotonic() - ended >= COLLECT_AFTER_S / 2

    run(make_app(endless_model_dir, sampling={"max_tokens": 4000}), scenario)
    assert gc.get_threshold() == before
