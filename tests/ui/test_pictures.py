"""Images drawn in the chat where the terminal draws pictures (app.ui.pictures, through textual-image).

How a terminal draws is its answer to textual-image's queries: a process on a real pseudo-terminal asks, and the
test is the terminal, its answers waiting in the input as a terminal's would (kitty: no sixel in its device
attributes, OK to the graphics query; a sixel terminal: 4 among its attributes; another: neither). What a picture
looks like needs such a terminal: here the app shows, as if one had answered, the picture's widget under the message.
The `pictures` setting draws in half blocks where the terminal draws no better ("blocks", whose look the snapshot in
test_image_chat shows), or never ("off", which asks the terminal nothing).
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import tty
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual_image.widget import HalfcellImage, SixelImage, TGPImage

from mlxchat.app.ui import pictures
from mlxchat.app.ui.app import ChatApp
from tests.pilot import hold_engine, make_app, ready, run, send, submit, wait_for
from tests.tiny_vlms import build_tiny_vlm, tiny_image
from tests.ui.test_attachments import attach

# The terminal's answers to the device-attributes query (ESC [ c) and, where it has one, to the graphics query.
TERMINALS = {
    "kitty": ("\x1b[?62;22c\x1b_Gi=1;OK\x1b\\", "tgp"),
    "sixel": ("\x1b[?62;4;22c", "sixel"),
    "plain": ("\x1b[?62;22c", None),
}


def asked(answers: str, way: str = "auto") -> str:
    """What a process on a pseudo-terminal whose input holds `answers` prints after asking it (ask_terminal), with
    the `pictures` setting `way`."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # (as a terminal app's input: each byte readable as it comes)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 1200, 800))  # (cells 10x20 pixels)
    os.write(master, answers.encode())
    code = f"from mlxchat.app.ui.pictures import ask_terminal; print('drawn as', ask_terminal({way!r}))"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # (the child is gone: its side of the terminal closed)
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert child.wait(60) == 0, out
    return out.decode(errors="replace")


@pytest.mark.parametrize("terminal", sorted(TERMINALS))
def test_pictures_are_drawn_the_way_the_terminal_answers_it_draws(terminal: str) -> None:
    answers, kind = TERMINALS[terminal]
    assert f"drawn as {kind}\n" in asked(answers)


def test_with_pictures_off_the_terminal_is_not_asked() -> None:
    answers, _ = TERMINALS["kitty"]
    assert "\x1b[c" in asked(answers)  # (textual-image's device-attributes query, as the terminal saw it)
    assert asked(answers, "off") == "drawn as None\n"  # (no query written: the answers wait unread)


def test_where_the_terminal_draws_the_image_is_under_its_message_and_goes_with_it(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "gemma3", "gemma3")
    tiny_image(tmp_path / "shot.png")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pictures, "_drawing", "tgp")  # (as kitty answered: the test above)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        await send(pilot, pane, "What is this?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        turn = pane.view.user_turn(0)
        [drawn] = pane.view.pictures_under(turn)
        copy = pane.chat.messages[0].attachments[0]["path"]
        assert type(drawn).__name__ == "TGPImage" and drawn.image == copy
        assert str(turn.render()).endswith("· 4 tokens")  # (the line stays, above the picture)
        assert drawn.region.y > turn.region.y and drawn.region.height > 0
        await pane.view.show(pane.chat.messages)  # a reopened chat draws it too
        assert len(pane.view.pictures_under(pane.view.user_turn(0))) == 1

        # A message taken back (escape while it waits in line for the one slot) takes its picture with its box.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        second = app.chat_panes[1]
        release = hold_engine(app)
        await submit(pilot, pane, "And then?")
        await attach(pilot, second, "shot")
        await submit(pilot, second, "What is this?")
        await wait_for(pilot, lambda: len(second.query(".user-picture")) == 1, "the waiting message's picture")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not second.busy, "the message to come out of the line")
        assert not second.query(".user-turn") and not second.query(".user-picture")
        release()

    run(make_app(folder, parallel=1), scenario)


# What is drawn under the message, by the `pictures` setting and what the terminal answered it draws (None: tmux, a
# terminal that draws no pictures).
DRAWN = {
    ("auto", None): None, ("auto", "tgp"): TGPImage, ("auto", "sixel"): SixelImage,
    ("blocks", None): HalfcellImage, ("blocks", "tgp"): TGPImage, ("blocks", "sixel"): SixelImage,
    ("off", None): None, ("off", "tgp"): None, ("off", "sixel"): None,
}


def test_the_pictures_setting_draws_in_half_blocks_where_the_terminal_draws_none_or_never(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "gemma3", "gemma3")
    tiny_image(tmp_path / "shot.png")
    monkeypatch.chdir(tmp_path)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        await send(pilot, pane, "What is this?")  # (as tmux: the terminal answered it draws no pictures)
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        turn = pane.view.user_turn(0)
        [drawn] = pane.view.pictures_under(turn)
        assert type(drawn) is HalfcellImage and drawn.image == pane.chat.messages[0].attachments[0]["path"]
        assert drawn.region.y > turn.region.y and drawn.region.height > 0
        assert str(turn.render()).endswith("· 4 tokens")  # (the line stays, above the picture)

        for (way, terminal), kind in DRAWN.items():  # the chat reopened with each setting, in each terminal
            app.settings = app.settings.updated({"pictures": way}, "the test")
            monkeypatch.setattr(pictures, "_drawing", terminal)
            await pane.view.show(pane.chat.messages)
            under = pane.view.pictures_under(pane.view.user_turn(0))
            assert [type(p) for p in under] == ([kind] if kind else []), (way, terminal)

    run(make_app(folder, parallel=1, pictures="blocks"), scenario)
