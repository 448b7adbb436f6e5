"""The reply widget in the real app: incremental Markdown drawn as Rich draws the whole, and
the conversation kept at the newest line unless the user scrolls away."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from textual.containers import VerticalScroll
from textual.geometry import Offset
from textual.pilot import Pilot
from textual.selection import Selection
from textual.widgets import Static

from mlxchat.app.chats.chat import ChatMessage
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.conversation_view import note, user_turn
from mlxchat.app.ui.widgets.reply_view import GROWTH_LINES, GUTTER, ReplyView, finished_blocks_end
from tests.pilot import make_app, ready, reply_held, run, screen_lines, wait_for

REPLIES = [
    "# A title\n\nA paragraph with **bold** and `code`.\n\n## Steps\n\n1. First\n\n2. Second, loose\n3. Third\n\n"
    "Text after the list.\n\n> A quote\n> on two lines\n\nThe end.",
    "Some code:\n\n```python\ndef f():\n\n    return 1\n```\n\nAnd a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    "- a bullet\n  continued\n\n      indented code after a blank\n\nLast words.",
]


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("One.\n\nTwo", 0, 0),  # the next block's first line is not whole yet
        ("One.\n\nTwo\n", 0, 6),
        ("```\na\n\nb\n```\n\nNext\n", 0, 14),  # a blank line in a code fence ends nothing
        ("1. a\n\n2. b\n", 0, 0),  # a list may go on
        ("Para\n\n  indented\n", 0, 0),  # an indented line may go on with the block
        ("One.\n\nTwo\n\nThree\n", 6, 11),
    ],
)
def test_a_block_is_finished_once_the_next_one_has_begun(text: str, start: int, end: int) -> None:
    assert finished_blocks_end(text, start) == end


async def _streaming_reply(app: ChatApp, pilot: Pilot, user_turn: str) -> tuple[VerticalScroll, ReplyView]:
    """A streaming reply under a user turn in the first chat, as a sent message mounts them."""
    pane = await ready(app, pilot)
    conversation = pane.query_one(".conversation", VerticalScroll)
    reply = ReplyView(streaming=True, classes="assistant-turn")
    await conversation.mount_all([Static(user_turn, classes="user-turn"), reply])
    await pilot.pause()
    return conversation, reply


def _line(reply: ReplyView, y: int) -> str:
    """The text of the reply's line `y` as the widget draws it, beside its gutter."""
    return reply.render_line(y).text.removeprefix(GUTTER).rstrip()


def _drawn(reply: ReplyView) -> list[str]:
    """The reply's lines as the widget draws them, without the blank ones at the end."""
    lines = [_line(reply, y) for y in range(reply.size.height)]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.mark.parametrize("text", REPLIES)
def test_a_reply_streamed_in_pieces_is_drawn_as_rich_draws_the_whole(tiny_model_dir: Path, text: str) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        _, reply = await _streaming_reply(app, pilot, "Show me some Markdown")
        for end in range(7, len(text) + 7, 7):
            reply.show(text[:end])
        await pilot.pause()
        width = reply.text_width
        console = Console(width=width, color_system=None)
        whole = console.render_lines(RichMarkdown(text), console.options.update_width(width), pad=False)
        assert _drawn(reply) == ["".join(segment.text for segment in line).rstrip() for line in whole]

    run(make_app(tiny_model_dir), scenario)


def test_the_newest_line_stays_in_view_unless_the_user_scrolls_away(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        conversation, reply = await _streaming_reply(app, pilot, "Tell me a long story")
        view = conversation.scrollable_content_region
        text = ""
        for n in range(1, 40):
            text += f"Paragraph {n} of the story.\n\n"
            reply.show(text)
            await pilot.pause()
            newest = reply.region.y + len(_drawn(reply)) - 1  # its row on the screen
            assert view.y <= newest < view.bottom, f"paragraph {n}"
            if conversation.scroll_y:  # scrolled: a few lines at a time, so few blank lines show
                assert newest >= view.bottom - GROWTH_LINES, f"paragraph {n}"
        assert conversation.scroll_y > 0

        conversation.scroll_home(animate=False, immediate=True)
        for n in range(40, 60):
            text += f"Paragraph {n} of the story.\n\n"
            reply.show(text)
            await pilot.pause()
            assert conversation.scroll_y == 0
        assert not reply.following

    run(make_app(tiny_model_dir), scenario)


def test_a_streaming_reply_draws_its_gutter_beside_its_lines_only(tiny_model_dir: Path) -> None:
    # The room a streaming reply reserves under its lines (the pane's, from the start) had the reply's left border
    # down all of it: a column of empty bars from the last words to the input box.
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        _, reply, hold = await reply_held(app, pilot, "Tell me a story", 8)
        await pilot.pause()
        assert reply.streaming and reply.size.height > len(_drawn(reply))  # room reserved under the words
        lines = screen_lines(app)
        above_input = [line for line in lines[: next(i for i, line in enumerate(lines) if line.startswith("╭"))] if line]
        bar = GUTTER.strip()
        assert above_input[-1].startswith(bar) and above_input[-1] != bar, lines  # the last words, not a bare bar
        hold.release()

    run(make_app(tiny_model_dir), scenario)


def test_turns_shorter_than_the_view_are_at_its_end_and_stay_in_view_when_a_reply_ends(tiny_model_dir: Path) -> None:
    # Textual's anchor bottom-aligns turns shorter than the view with a negative scroll_y. A reply that
    # ended before any frame drew it was judged scrolled away from there, and the pane pinned the
    # conversation at that scroll_y: every turn below the view.
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        conversation = pane.query_one(".conversation", VerticalScroll)
        reply = ReplyView("A short reply.")
        await conversation.mount_all([Static("A question", classes="user-turn"), reply])
        await pilot.pause()
        assert conversation.scroll_y < 0 and reply.following
        pane.view.anchor_after_reply(reply.following)
        await pilot.pause()
        assert conversation.region.y <= reply.region.y < reply.region.bottom <= conversation.region.bottom

    run(make_app(tiny_model_dir), scenario)


@pytest.mark.parametrize("text", REPLIES)
def test_an_ended_reply_is_as_tall_as_its_lines_and_its_text_can_be_selected(tiny_model_dir: Path, text: str) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        conversation, reply = await _streaming_reply(app, pilot, "Show me some Markdown")
        reply.show(text[: len(text) // 2])
        await pilot.pause()
        reply.finish(text)
        await pilot.pause()
        width = reply.text_width
        console = Console(width=width, color_system=None)
        whole = console.render_lines(RichMarkdown(text), console.options.update_width(width), pad=False)
        lines = ["".join(segment.text for segment in line).rstrip() for line in whole]
        assert not reply.streaming and reply.size.height == len(lines)  # no room reserved below it
        assert [_line(reply, y) for y in range(reply.size.height)] == lines
        # As it is reopened from a saved chat: the same lines.
        saved = ReplyView(text, classes="assistant-turn")
        await conversation.mount(saved)
        await pilot.pause()
        assert [_line(saved, y) for y in range(saved.size.height)] == lines
        selected = saved.get_selection(Selection(Offset(0, 0), Offset(width, len(lines) - 1)))
        assert selected is not None and selected[0] == "\n".join(lines)
        # Drawn selected: the selection's background, the text's own colour.
        y = next(y for y, line in enumerate(lines) if len(line.strip()) > 3)
        x = len(lines[y]) - len(lines[y].lstrip())
        plain = [s for s in saved.render_line(y).crop(len(GUTTER)) if s.text.strip()][0].style
        app.screen.selections = {saved: Selection(Offset(x, y), Offset(x + 3, y))}
        chosen = [s for s in saved.render_line(y).crop(len(GUTTER)) if s.text.strip()][0]
        assert chosen.text == lines[y][x : x + 3] and chosen.style is not None and plain is not None
        assert chosen.style.bgcolor != plain.bgcolor and chosen.style.color == plain.color

    run(make_app(tiny_model_dir), scenario)


def test_a_turn_sent_and_a_reply_ended_are_each_laid_out_once(tiny_model_dir: Path) -> None:
    """Textual lays the screen out again after a layout that changed a widget's virtual size; with eight chats
    in the grid that second layout took 8-12 ms and moved nothing (laid_out_once)."""
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.pause(0.2)
        screen, updates = app.screen, []
        refresh_layout = screen._refresh_layout  # (Textual's: once per screen update that lays out or scrolls)
        screen._refresh_layout = lambda *args, **kwargs: updates.append(1) or refresh_layout(*args, **kwargs)
        reply = ReplyView(streaming=True, classes="assistant-turn")
        await pane.view.mount_all([user_turn(ChatMessage("user", "A question")), reply])
        await wait_for(pilot, lambda: reply.size.height > 0, "the turns sent laid out")
        await pilot.pause(0.2)  # (a second layout, where one is asked, comes a frame later)
        sent = len(updates)
        ended = note("The reply was cut at the length limit.")
        with app.batch_update():  # (as the frames show a reply ended: one screen update)
            reply.finish("An answer.")
            await pane.view.mount(ended)
        await wait_for(pilot, lambda: ended.size.height > 0, "the reply ended laid out")
        await pilot.pause(0.2)
        assert (sent, len(updates) - sent) == (1, 1)

    run(make_app(tiny_model_dir), scenario)
