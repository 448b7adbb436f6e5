"""A chat's turns on the screen: user boxes, replies as Markdown, the notes on how each ended and the chat's seat."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import takewhile

from textual.containers import VerticalScroll
from textual.widget import Widget

from mlxchat.app.chats.chat import Chat, ChatMessage, reasoning_header
from mlxchat.app.chats.conversation import end_note, lost_note, timings_line
from mlxchat.app.files.attachments import Attachment
from mlxchat.app.ui.pictures import picture
from mlxchat.app.ui.workarounds.laid_out_once import TurnText, quiet_virtual_size
from mlxchat.app.ui.widgets.reasoning_block import ReasoningBlock
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.ui.widgets.tool_widgets import ToolEntry
from mlxchat.engine import Done


def note(text: str, classes: str = "") -> TurnText:
    """A line in the conversation that is not a turn: how a reply ended, a change of seat, a refusal."""
    return TurnText(text, classes=f"turn-note {classes}".strip(), markup=False)


def user_turn(message: ChatMessage) -> TurnText:
    """A user message's box: its text, then a line for each file sent with it."""
    files = [f"@{Attachment.from_record(a).label}" for a in message.attachments]
    return TurnText("\n".join([message.text, *files] if message.text else files), classes="user-turn", markup=False)


def user_pictures(message: ChatMessage, way: str) -> list[Widget]:
    """The pictures of the images sent with a user message, drawn under its box as the `pictures` setting `way`
    and the terminal allow (app.ui.pictures); none elsewhere, where the box's line for each image stands alone."""
    drawn = (picture(a.path, way) for a in map(Attachment.from_record, message.attachments) if a.is_image)
    return [p for p in drawn if p is not None]


class ConversationView(VerticalScroll):
    """The turns of one chat, scrolled, kept at the end as they come unless the user scrolled away."""

    virtual_size = quiet_virtual_size()  # (laid_out_once)

    def __init__(self, chat: Chat) -> None:
        super().__init__(classes="conversation")
        self._chat = chat  # its max_tokens, for the note on a reply cut at it

    def compose(self) -> Iterator[Widget]:
        for message in self._chat.messages:
            yield from self.turn(message)

    def on_mount(self) -> None:
        self.anchor()

    def turn(self, message: ChatMessage) -> Iterator[Widget]:
        """The widgets of a saved turn: a user box, or a reply with the note on how it ended."""
        if message.role == "user":
            yield user_turn(message)
            yield from user_pictures(message, self.app.settings.pictures)
            return
        if message.reasoning:
            yield ReasoningBlock(message.reasoning, reasoning_header(message), collapsed=not self._chat.reasoning_open)
        if message.text:
            yield ReplyView(message.text, classes="assistant-turn")
        yield from (ToolEntry(call) for call in message.tool_calls)
        # (a reply that only called tools wrote what it meant to)
        yield from self._end_note(message.text or "⚙" * bool(message.tool_calls), message.finish_reason, None,
                                  bool(message.reasoning))
        yield from self._timings(message)

    @staticmethod
    def _timings(message: ChatMessage) -> Iterator[Widget]:
        """A reply's timings line, shown while the pane has the -timings class (alt+t)."""
        line = timings_line(message)
        if line is not None:
            yield TurnText(line, classes="turn-timings", markup=False)

    def _end_note(self, text: str, reason: str | None, error: str | None, reasoned: bool) -> Iterator[Widget]:
        """The note under a reply on how it ended, where it says more than that it is done."""
        found = end_note(reason, text, self._chat.sampling.max_tokens, error, reasoned)
        if found is not None:
            yield note(*found)

    async def show(self, messages: Iterable[ChatMessage]) -> None:
        """Draws the conversation again from `messages` (after turns were taken back)."""
        await self.remove_children()
        await self.mount_all([widget for message in messages for widget in self.turn(message)])

    async def finish(self, streamed: ReplyView, done: Done, saved: ChatMessage | None,
                     block: ReasoningBlock | None) -> None:
        """Shows how a streamed reply ended: whole, from the engine's own text, with its notes and timings
        (`saved`: the reply as the chat keeps it; `block`: its reasoning, folded now with its exact figures);
        a reply that wrote nothing goes."""
        if done.text:
            streamed.finish(done.text)  # the streamed widget stays: a new one would cost a layout more
        if block is not None and saved is not None:
            block.show(done.reasoning)
            block.fold(reasoning_header(saved), collapsed=not self._chat.reasoning_open)
        widgets = list(self._end_note(done.text or "⚙" * bool(done.tool_calls), done.reason, done.error,
                                      bool(done.reasoning)))
        if done.stats.lost:
            widgets.append(note(lost_note(done.stats)))
        if done.text and saved is not None:
            widgets.extend(self._timings(saved))
        if widgets:
            await self.mount_all(widgets, after=streamed)
        if not done.text:
            await streamed.remove()

    async def queue_note(self, text: str, before: Widget) -> None:
        """Shows a queued message's place in line where its reply will be."""
        shown = next(iter(self.query(".queue-note").results(TurnText)), None)
        if shown is None:
            await self.mount(TurnText(text, classes="queue-note", markup=False), before=before)
        else:
            shown.update(text)

    async def clear_queue_note(self) -> None:
        await self.query(".queue-note").remove()

    def last_reasoning(self) -> ReasoningBlock | None:
        """The reasoning block of the chat's last reply, if it has one."""
        return next((w for w in reversed(self._last_reply()) if isinstance(w, ReasoningBlock)), None)

    def last_tool_entries(self) -> list[ToolEntry]:
        """The entries of the tool calls of the chat's last reply (all its rounds)."""
        return [w for w in self._last_reply() if isinstance(w, ToolEntry)]

    def _last_reply(self) -> list[Widget]:
        """The widgets after the user's last message."""
        turns = list(self.children)
        last_user = max((i for i, w in enumerate(turns) if w.has_class("user-turn")), default=-1)
        return turns[last_user + 1 :]

    def user_turn(self, nth: int) -> Widget:
        """The box of the user's `nth` message (0 is the first)."""
        return list(self.query(".user-turn"))[nth]

    def pictures_under(self, turn: Widget | None) -> list[Widget]:
        """The pictures drawn under user box `turn` (none where it is not shown)."""
        turns = list(self.children)
        if turn not in turns:
            return []
        return list(takewhile(lambda w: w.has_class("user-picture"), turns[turns.index(turn) + 1 :]))

    def anchor_after_reply(self, following: bool) -> None:
        """Gives the scrolling back to Textual's anchor when a reply has ended (a streaming reply
        scrolls the conversation itself): kept at the end as turns come, unless the user had
        scrolled away from it, who stays where they are."""
        y = self.scroll_y
        self.anchor()
        if not following:
            self.scroll_to(y=y, animate=False, immediate=True)
