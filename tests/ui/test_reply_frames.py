"""The clock that draws streaming replies: one shown chat repainted per frame, endings shown apart,
full garbage collections held off from the first reply until a moment after the last is shown ended."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.gc_hold import COLLECT_AFTER_S, HELD_THRESHOLD
from mlxchat.app.ui.reply_frames import CHANGE_INTERVAL_S, ReplyFrames
from tests.pilot import make_app, ready, run, submit, wait_for


class Chat:
    """A chat as the clock sees it, which notes the frames it was repainted in."""

    def __init__(self, shown: bool = True) -> None:
        self.busy, self.display, self.repainted, self.frames = True, shown, 0, 0

    def draw_frame(self, repaint: bool) -> None:
        self.frames += 1
        self.repainted += repaint


def test_each_frame_repaints_one_shown_chat_in_turn(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        chats = [Chat(), Chat(), Chat(), Chat(shown=False)]
        statuses: list[Chat] = []
        frames = ReplyFrames(app, lambda: chats, statuses.append, lambda: True)
        frames.wake()
        await wait_for(pilot, lambda: chats[0].frames >= 7, "seven frames")
        for chat in chats:
            chat.busy = False
        frames.stop()
        assert len({chat.frames for chat in chats}) == 1  # every chat takes its text each frame
        assert sorted(chat.repainted for chat in chats[:3]) in ([2, 2, 3], [2, 3, 3], [3, 3, 3])
        assert chats[3].repainted == 0  # (a chat out of view is repainted when shown)
        # Its status line is redrawn with it: one pane changes per frame.
        assert [statuses.count(chat) for chat in chats] == [chat.repainted for chat in chats]

    run(make_app(tiny_model_dir), scenario)


@pytest.mark.parametrize("writing", [True, False])
def test_replies_that_end_together_are_shown_ended_one_after_another(tiny_model_dir: Path, writing: bool) -> None:
    """While the engine writes other replies each change waits CHANGE_INTERVAL_S after the one before (keys are read
    meanwhile); once it writes none, they follow at once, each still a change of its own, in order."""
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        frames = ReplyFrames(app, lambda: [], lambda _: None, lambda: writing)
        shown: list[tuple[int, float]] = []
        for number in range(3):
            async def ending(number: int = number) -> None:
                shown.append((number, time.monotonic()))
            frames.change(ending)
        await wait_for(pilot, lambda: len(shown) == 3, "three endings")
        assert [number for number, _ in shown] == [0, 1, 2]
        gaps = [b - a for (_, a), (_, b) in zip(shown, shown[1:])]
        if writing:
            assert min(gaps) >= CHANGE_INTERVAL_S * 0.9

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
